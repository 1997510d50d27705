"""`_manifest.json`: the truth about a version directory.

Shards, fields and options come first and are byte-reproducible; what
differs between runs (application id, job id, time) lives under "run".
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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

    def referenced_from(self, parent: str) -> "ShardEntry":
        """This entry as a child of `parent` (the version this entry was read from) lists it."""
        return self if self.version is not None else dataclasses.replace(self, version=parent)

    @classmethod
    def written(cls, info: "ShardInfo", name: str, keys_ascending: bool = False) -> "ShardEntry":
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
            "run": self.run,
        }
        return (json.dumps(document, indent=1, sort_keys=False, ensure_ascii=False) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Manifest":
        document = json.loads(data)
        if document.get("__kind__") != MANIFEST_KIND:
            raise ValueError(f"not a spark-webdataset manifest (__kind__={document.get('__kind__')!r})")
        return cls(
            shards=[ShardEntry(**shard) for shard in document["shards"]],
            fields=document["fields"],
            options=document["options"],
            run=document.get("run", {}),
            sample_index=document.get("sample_index"),
            sample_index_bytes=document.get("sample_index_bytes"),
            parent=document.get("parent"),
        )

    def content(self) -> dict[str, Any]:
        """Everything but the run metadata: equal for equal input and options."""
        document = json.loads(self.to_json())
        document.pop("run")
        return document
