"""The writer's options, parsed once on the driver so bad values fail before any task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..format.names import WebDatasetError
from ..format.shard_writer import MIN_SHARD_BYTES
from ..format.sizes import parse_size

DEFAULT_MAX_SHARD_BYTES = 3 * 1024**3
# Test-only: inject a task failure ("raise" or "exit") into the first attempt
# of the listed partitions, e.g. "exit:0,1". Never set it in production.
TEST_FAULT_OPTION = "_testfault"
_KNOWN = {"path", "maxshardbytes", "maxsamplespershard", "mtime", "allowpax", TEST_FAULT_OPTION}


def _bool(name: str, value: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise WebDatasetError(f"option {name}={value!r} must be true or false")


def _int(name: str, value: str, minimum: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise WebDatasetError(f"option {name}={value!r} is not a whole number") from None
    if number < minimum:
        raise WebDatasetError(f"option {name}={value!r} must be at least {minimum}")
    return number


@dataclass(frozen=True)
class WriteOptions:
    path: str
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    max_samples_per_shard: int | None = None
    mtime: int = 0
    allow_pax: bool = False
    test_fault: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "WriteOptions":
        lowered = {str(k).lower(): v for k, v in options.items()}
        unknown = sorted(set(lowered) - _KNOWN)
        if unknown:
            raise WebDatasetError(
                f"unknown option(s) {', '.join(unknown)} for format webdataset "
                "(known: maxShardBytes, maxSamplesPerShard, mtime, allowPax)"
            )
        path = lowered.get("path")
        if not path:
            raise WebDatasetError("no path: call .save(uri) with the version directory to write")
        try:
            max_bytes = parse_size(lowered.get("maxshardbytes", DEFAULT_MAX_SHARD_BYTES), "maxShardBytes")
        except ValueError as error:
            raise WebDatasetError(str(error)) from None
        if max_bytes < MIN_SHARD_BYTES:
            raise WebDatasetError(
                f"option maxShardBytes={lowered.get('maxshardbytes')} is smaller than one tar header "
                f"plus the end-of-archive blocks ({MIN_SHARD_BYTES} bytes)"
            )
        max_samples = lowered.get("maxsamplespershard")
        return cls(
            path=path.rstrip("/"),
            max_shard_bytes=max_bytes,
            max_samples_per_shard=_int("maxSamplesPerShard", max_samples, 1) if max_samples else None,
            mtime=_int("mtime", lowered.get("mtime", "0"), 0),
            allow_pax=_bool("allowPax", lowered.get("allowpax", "false")),
            test_fault=lowered.get(TEST_FAULT_OPTION),
        )

    def manifest_options(self) -> dict[str, Any]:
        """What shapes the bytes; recorded in the manifest."""
        return {
            "maxShardBytes": self.max_shard_bytes,
            "maxSamplesPerShard": self.max_samples_per_shard,
            "mtime": self.mtime,
            "allowPax": self.allow_pax,
        }
