"""`_manifest.json`: the truth about a version directory.

Shards, fields and options come first and are byte-reproducible; what
differs between runs (application id, job id, time) lives under "run".
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CorruptManifest

if TYPE_CHECKING:
    from .shard_writer import ShardInfo

MANIFEST_KIND = "spark-webdataset-manifest-v1"


@dataclass(frozen=True)
class ShardEntry:
    name: str
    samples: int
    bytes: int
    first_key: str
    last_key: str
    # Castagnoli, base64 of the big-endian value, as GCS reports it; None in manifests
    # written before it existed (they carry sha256)
    crc32c: str | None = None
    sha256: str | None = None  # written with option checksum=sha256 (and by older writers)
    # True when the task that wrote the shard got its keys in ascending order (a key-sorted
    # write): every key of the shard lies between first_key and last_key, so readers can prune.
    keys_ascending: bool = False
    # The version whose directory stores the bytes, for a shard referenced from a parent (never a
    # chain: always the version that wrote it); None for a shard of this version's own.
    version: str | None = None

    @property
    def location(self) -> str:
        """Where the shard is, relative to the version directory: its name, or `../<version>/<name>`
        (what shardindex.json lists and the sample index's `shard` column holds)."""
        return self.name if self.version is None else f"../{self.version}/{self.name}"

    def referenced_from(self, parent: str) -> ShardEntry:
        """This entry as a child of `parent` (the version this entry was read from) lists it."""
        return self if self.version is not None else dataclasses.replace(self, version=parent)

    @classmethod
    def written(cls, info: ShardInfo, name: str, keys_ascending: bool = False) -> ShardEntry:
        """The entry of a shard the writer finished (`info`), under its final `name`."""
        return cls(
            name=name,
            samples=info.samples,
            bytes=info.bytes,
            crc32c=info.crc32c,
            sha256=info.sha256,
            first_key=info.first_key,
            last_key=info.last_key,
            keys_ascending=keys_ascending,
        )

    def to_dict(self) -> dict[str, Any]:
        """The manifest's shard entry; a checksum the writer did not compute is left out."""
        document: dict[str, Any] = {"name": self.name, "samples": self.samples, "bytes": self.bytes}
        if self.crc32c is not None:
            document["crc32c"] = self.crc32c
        if self.sha256 is not None:
            document["sha256"] = self.sha256
        document["first_key"] = self.first_key
        document["last_key"] = self.last_key
        document["keys_ascending"] = self.keys_ascending
        if self.version is not None:
            document["version"] = self.version
        return document


@dataclass(frozen=True)
class IndexLayer:
    """A sample index file of an ancestor version that a version reads through (its manifest's
    `sample_index_layers`, nearest ancestor first): `version` STORES the file at `path` (relative to
    that version's directory; never a copy, like a referenced shard), `bytes` and `rows` as written."""

    version: str
    path: str
    bytes: int
    rows: int

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "path": self.path, "bytes": self.bytes, "rows": self.rows}


@dataclass
class Manifest:
    shards: list[ShardEntry]
    fields: list[dict[str, str]]  # [{"name": "png", "type": "binary"}], column order
    options: dict[str, Any]
    run: dict[str, Any] = field(default_factory=dict)
    # The version's sample index (format/sample_index.py), relative to the version directory, and
    # its size: random reads find samples in it, and the next append proves its keys new against it.
    sample_index: str | None = None
    sample_index_bytes: int | None = None
    parent: str | None = None  # the published version this one was built on (same root)
    # Ancestors' index files this version's index reads through (dataset/index_layers.py): its own
    # `sample_index` holds the rows it wrote; empty (every version written before layers): it is whole.
    sample_index_layers: list[IndexLayer] = field(default_factory=list)

    @property
    def own_shards(self) -> list[ShardEntry]:
        """The shards this version's directory stores (not those referenced from a parent)."""
        return [shard for shard in self.shards if shard.version is None]

    @property
    def samples(self) -> int:
        return sum(shard.samples for shard in self.shards)

    @property
    def bytes(self) -> int:
        return sum(shard.bytes for shard in self.shards)

    def to_json(self) -> bytes:
        document = {
            "__kind__": MANIFEST_KIND,
            "samples": self.samples,
            "bytes": self.bytes,
            "shard_count": len(self.shards),
            "shards": [shard.to_dict() for shard in self.shards],
            "key": "__key__",
            "fields": self.fields,
            "options": self.options,
            "sample_index": self.sample_index,
            "sample_index_bytes": self.sample_index_bytes,
            **({"parent": self.parent} if self.parent is not None else {}),
            **(
                {"sample_index_layers": [layer.to_dict() for layer in self.sample_index_layers]}
                if self.sample_index_layers
                else {}
            ),
            "run": self.run,
        }
        return (json.dumps(document, indent=1, sort_keys=False, ensure_ascii=False) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes, source: str | None = None) -> Manifest:
        """The manifest in `data`; CorruptManifest (naming `source`, the file) if it is not one:
        not JSON, another kind, a value of the wrong type or a negative size."""
        where = source or "manifest"
        try:
            document = json.loads(data)
        except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise CorruptManifest(f"{where}: not JSON ({error})") from None
        if not isinstance(document, dict) or document.get("__kind__") != MANIFEST_KIND:
            kind = document.get("__kind__") if isinstance(document, dict) else type(document).__name__
            raise CorruptManifest(f"{where}: not a spark-webdataset manifest (__kind__={kind!r})")
        shards = _field(document, "shards", list, where)
        fields = _field(document, "fields", list, where)
        for number, entry in enumerate(fields):
            if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("name", "type")):
                raise CorruptManifest(f"{where}: fields[{number}] is {entry!r}, not a {{name, type}} of strings")
        return cls(
            shards=[_shard_entry(entry, f"{where}: shards[{number}]") for number, entry in enumerate(shards)],
            fields=fields,
            options=_field(document, "options", dict, where),
            run=_field(document, "run", dict, where, {}),
            sample_index=_field(document, "sample_index", str, where, None),
            sample_index_bytes=_size(document, "sample_index_bytes", where, None),
            parent=_field(document, "parent", str, where, None),
            sample_index_layers=[
                _layer(entry, f"{where}: sample_index_layers[{number}]")
                for number, entry in enumerate(_field(document, "sample_index_layers", list, where, []))
            ],
        )

    def content(self) -> dict[str, Any]:
        """Everything but the run metadata: equal for equal input and options."""
        document = json.loads(self.to_json())
        document.pop("run")
        return document


_REQUIRED = object()
_SHARD_TEXT = ("name", "first_key", "last_key")
_SHARD_FIELDS = {field.name for field in dataclasses.fields(ShardEntry)}


def _field(document: dict, name: str, kind: type, where: str, default: Any = _REQUIRED) -> Any:
    """`document[name]`, of type `kind` (None allowed when there is a default)."""
    if name not in document or (default is not _REQUIRED and document[name] is None):
        if default is _REQUIRED:
            raise CorruptManifest(f"{where}: no {name!r}")
        return default
    value = document[name]
    if not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
        raise CorruptManifest(f"{where}: {name!r} is {_short(value)}, not a {kind.__name__}")
    return value


def _size(document: dict, name: str, where: str, default: Any = _REQUIRED) -> Any:
    """A count or a size: a whole number >= 0."""
    value = _field(document, name, int, where, default)
    if isinstance(value, int) and value < 0:
        raise CorruptManifest(f"{where}: {name!r} is {value}, not a whole number >= 0")
    return value


def _shard_entry(entry: object, where: str) -> ShardEntry:
    if not isinstance(entry, dict):
        raise CorruptManifest(f"{where} is {_short(entry)}, not an object")
    unknown = set(entry) - _SHARD_FIELDS
    if unknown:
        raise CorruptManifest(f"{where} has unknown entries {sorted(unknown)!r}")
    for name in _SHARD_TEXT:
        _field(entry, name, str, where)
    crc = _field(entry, "crc32c", str, where, None)
    if crc is not None:
        try:
            valid = len(base64.b64decode(crc, validate=True)) == 4
        except (binascii.Error, ValueError):
            valid = False
        if not valid:
            raise CorruptManifest(f"{where}: 'crc32c' is {_short(crc)}, not the base64 of 4 bytes")
    sha = _field(entry, "sha256", str, where, None)
    if sha is not None and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
        raise CorruptManifest(f"{where}: 'sha256' is {_short(sha)}, not 64 hex digits")
    return ShardEntry(
        name=entry["name"],
        samples=_size(entry, "samples", where),
        bytes=_size(entry, "bytes", where),
        first_key=entry["first_key"],
        last_key=entry["last_key"],
        crc32c=crc,
        sha256=sha,
        keys_ascending=_field(entry, "keys_ascending", bool, where, False),
        version=_field(entry, "version", str, where, None),
    )


def _layer(entry: object, where: str) -> IndexLayer:
    """One entry of `sample_index_layers` (its path and version are checked where it is read)."""
    if not isinstance(entry, dict):
        raise CorruptManifest(f"{where} is {_short(entry)}, not an object")
    unknown = set(entry) - {"version", "path", "bytes", "rows"}
    if unknown:
        raise CorruptManifest(f"{where} has unknown entries {sorted(unknown)!r}")
    return IndexLayer(
        version=_field(entry, "version", str, where),
        path=_field(entry, "path", str, where),
        bytes=_size(entry, "bytes", where),
        rows=_size(entry, "rows", where),
    )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@contextlib.contextmanager
def naming(path: Callable[[], str]) -> Iterator[None]:
    """A CorruptManifest raised inside names the file `path()` says (readers of manifests that
    do not pass `source` to `from_json`)."""
    try:
        yield
    except CorruptManifest as error:
        try:
            where = path()
        except Exception:  # noqa: BLE001 - naming the file is best effort; the error is already typed
            raise error from None
        if where in str(error):
            raise
        raise CorruptManifest(f"{where}: {error}") from None
