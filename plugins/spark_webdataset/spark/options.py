"""The data source's options, each parsed here once into a typed value.

Write options are parsed on the driver so bad values fail before any task;
read options when the reader is planned. A job that hands options to the
data source builds the typed value and turns it into Spark's strings at that
one boundary (`WriteOptions.spark_options`); `parse` reads them back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..dataset.build_rules import APPEND, LATEST, BuildBase, Spelling, parse_max_shard_bytes
from ..dataset.lock import DEFAULT_LEASE_SECONDS
from ..errors import BadOption
from ..format.checksums import CHECKSUMS, CRC32C
from ..format.shard_writer import DEFAULT_MAX_SHARD_BYTES
from ..format.ustar import MAX_USTAR_SIZE

# The commit lock's lease: how long a dead committer blocks the next one.
COMMIT_LEASE_OPTION = "commitleaseseconds"
_KNOWN = {
    "path",
    "maxshardbytes",
    "maxsamplespershard",
    "mtime",
    "allowpax",
    "checksum",
    COMMIT_LEASE_OPTION,
    "parent",
    "change",
}
LATEST_PARENT = LATEST  # option parent=LATEST: the dataset's LATEST when the write starts
OPTION_NAMES = Spelling(change="option change", parent="option parent")  # the build rules, as options


def parse_bool(name: str, value: object) -> bool:
    """The one boolean parser of read and write options."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise BadOption(f"option {name}={value!r} must be true or false")


def parse_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise BadOption(f"option {name}={value!r} is not a whole number") from None
    if number < minimum or (maximum is not None and number > maximum):
        bounds = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise BadOption(f"option {name}={value!r} must be {bounds}")
    return number


def parse_choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    text = str(value).strip().lower()
    if text not in allowed:
        raise BadOption(f"option {name}={value!r} must be one of {', '.join(allowed)}")
    return text


def parse_seconds(name: str, value: object) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        raise BadOption(f"option {name}={value!r} is not a number of seconds") from None
    if number < 0:
        raise BadOption(f"option {name}={value!r} must not be negative")
    return number


def _known_options(
    options: Mapping[str, str], known: set[str], what: str, spelled: str, how: str
) -> tuple[dict[str, str], str]:
    """Options by lower-cased name (Spark's are case-insensitive) and the path; BadOption for an
    unknown option or no path."""
    lowered = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(set(lowered) - known)
    if unknown:
        raise BadOption(f"unknown {what} {', '.join(unknown)} for format webdataset (known: {spelled})")
    path = lowered.get("path")
    if not path:
        raise BadOption(f"no path: {how}")
    return lowered, path


@dataclass(frozen=True)
class WriteOptions:
    path: str
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    max_samples_per_shard: int | None = None
    mtime: int = 0
    allow_pax: bool = False
    checksum: str = CRC32C  # crc32c always; "sha256" computes and records sha256 as well
    commit_lease_seconds: float = DEFAULT_LEASE_SECONDS
    # A published version of the same root that a new version is built on: its shards are
    # referenced, not copied ("LATEST", or a version id).
    parent: str | None = None
    # What the written rows do to the parent: add new keys (append), replace or add (upsert),
    # remove the keys given (delete: only `__key__` is read).
    change: str = APPEND

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        lowered, path = _known_options(
            options, _KNOWN, "option(s)",
            "maxShardBytes, maxSamplesPerShard, mtime, allowPax, checksum, commitLeaseSeconds, parent, change",
            "call .save(uri) with the version directory to write",
        )  # fmt: skip
        max_bytes = parse_max_shard_bytes(lowered.get("maxshardbytes", cls.max_shard_bytes), "option maxShardBytes")
        max_samples = lowered.get("maxsamplespershard")
        base = BuildBase.checked(lowered.get("change"), lowered.get("parent"), OPTION_NAMES)
        return cls(
            path=path.rstrip("/"),
            max_shard_bytes=max_bytes,
            max_samples_per_shard=parse_int("maxSamplesPerShard", max_samples, 1) if max_samples else None,
            mtime=parse_int("mtime", lowered.get("mtime", cls.mtime), 0, MAX_USTAR_SIZE),
            allow_pax=parse_bool("allowPax", lowered.get("allowpax", cls.allow_pax)),
            checksum=parse_choice("checksum", lowered.get("checksum", cls.checksum), CHECKSUMS),
            commit_lease_seconds=parse_seconds(
                "commitLeaseSeconds", lowered.get(COMMIT_LEASE_OPTION, cls.commit_lease_seconds)
            ),
            parent=base.parent,
            change=base.change,
        )

    def spark_options(self) -> dict[str, str]:
        """These values as Spark options (strings; `parse` reads them back to the same values).
        Without the path: `.save(path)` gives it."""
        options = {
            "maxShardBytes": str(self.max_shard_bytes),
            "mtime": str(self.mtime),
            "allowPax": str(self.allow_pax).lower(),
            "checksum": self.checksum,
            "commitLeaseSeconds": repr(self.commit_lease_seconds),
        }
        if self.max_samples_per_shard is not None:
            options["maxSamplesPerShard"] = str(self.max_samples_per_shard)
        if self.parent is not None:
            options["parent"] = self.parent
        if self.change != APPEND:
            options["change"] = self.change
        return options

    def manifest_options(self) -> dict[str, Any]:
        """What shapes the bytes (and the manifest's checksums); recorded in the manifest."""
        return {
            "maxShardBytes": self.max_shard_bytes,
            "maxSamplesPerShard": self.max_samples_per_shard,
            "mtime": self.mtime,
            "allowPax": self.allow_pax,
            "checksum": self.checksum,
        }


CHECKPOINT_OPTION = "checkpointlocation"


@dataclass(frozen=True)
class StreamOptions:
    """A streaming write's options: the batch writer's, plus the query's checkpoint, which
    names the stream in the manifest (its last committed batch id)."""

    write: WriteOptions
    checkpoint: str

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        lowered = {str(k).lower(): v for k, v in options.items()}
        checkpoint = str(lowered.pop(CHECKPOINT_OPTION, "") or "").rstrip("/")
        if not checkpoint:
            raise BadOption(
                "a webdataset stream needs option checkpointLocation: the checkpoint names the stream, "
                "and the manifest records its last committed batch so a replayed batch commits nothing twice "
                "(df.writeStream.format('webdataset').option('checkpointLocation', uri).start(path))"
            )
        return cls(write=WriteOptions.parse(lowered), checkpoint=checkpoint)


@dataclass(frozen=True)
class ReadOptions:
    path: str
    skip_bad_shards: bool = False
    bad_shards_dir: str | None = None
    keys: KeyRange | None = None

    @classmethod
    def parse(cls, options) -> ReadOptions:
        lowered, path = _known_options(
            options, {"path", "paths", "skipbadshards", "badshardsdir", "keymin", "keymax", "keyprefix"},
            "read option(s)", "skipBadShards, badShardsDir, keyMin, keyMax, keyPrefix",
            "call .load(uri) with a version directory, dataset root or shard pattern",
        )  # fmt: skip
        skip = parse_bool("skipBadShards", lowered.get("skipbadshards", cls.skip_bad_shards))
        bounds = KeyRange(lowered.get("keymin"), lowered.get("keymax"), lowered.get("keyprefix"))
        return cls(
            path=path,
            skip_bad_shards=skip,
            bad_shards_dir=lowered.get("badshardsdir"),
            keys=bounds if bounds.limited else None,
        )


@dataclass(frozen=True)
class KeyRange:
    """The reader's key options: keyMin <= key <= keyMax, key starting with keyPrefix.

    Options, not pushed filters: pyspark 4.2 keeps the partitions planned
    for one query's pushed filters on the DataFrame and reuses them for its
    next query that pushes none, so pruning by `where()` would silently drop
    rows (`df.where(key = x).count()` then `df.count()`). Options belong to
    the DataFrame: every query of it reads the same range. Python orders str
    by code point, the order of their UTF-8 bytes, Spark's string order.
    """

    minimum: str | None = None
    maximum: str | None = None
    prefix: str | None = None

    @property
    def limited(self) -> bool:
        return any(bound is not None for bound in (self.minimum, self.maximum, self.prefix))

    def may_hold(self, first: str, last: str) -> bool:
        """May a shard holding only keys in [first, last] hold a key in the range?"""
        if self.minimum is not None and last < self.minimum:
            return False
        if self.maximum is not None and first > self.maximum:
            return False
        if self.prefix is not None:
            # a first key above the prefix that does not start with it is above every key that does
            return last >= self.prefix and (first < self.prefix or first.startswith(self.prefix))
        return True

    def mask(self, keys: pyarrow.Array) -> pyarrow.Array:  # noqa: F821
        """Which of these keys are in the range (vectorized)."""
        import functools

        import pyarrow.compute as pc

        conditions = []  # a KeyRange is built only when limited: at least one
        if self.minimum is not None:
            conditions.append(pc.greater_equal(keys, self.minimum))
        if self.maximum is not None:
            conditions.append(pc.less_equal(keys, self.maximum))
        if self.prefix is not None:
            conditions.append(pc.starts_with(keys, self.prefix))
        return functools.reduce(pc.and_, conditions)
