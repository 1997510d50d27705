"""Shared checks: what a written version must look like on disk."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def manifest(directory: str | Path) -> dict:
    return json.loads((Path(directory) / "_manifest.json").read_text())


def shard_paths(directory: str | Path) -> list[Path]:
    return sorted(Path(directory).glob("shard-*.tar"))


def assert_version_consistent(directory: str | Path, max_shard_bytes: int | None = None) -> dict:
    """Manifest and files agree; names contiguous; caps held; nothing staged is left."""
    document = manifest(directory)
    paths = shard_paths(directory)
    assert [p.name for p in paths] == [f"shard-{i:06d}.tar" for i in range(len(paths))]
    assert [s["name"] for s in document["shards"]] == [p.name for p in paths]
    for entry, path in zip(document["shards"], paths):
        data = path.read_bytes()
        assert entry["bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        if max_shard_bytes is not None and entry["samples"] > 1:
            assert len(data) <= max_shard_bytes, f"{path.name} is {len(data)} bytes"
    assert document["samples"] == sum(s["samples"] for s in document["shards"])
    assert not os.path.exists(os.path.join(directory, "_staging"))
    return document
