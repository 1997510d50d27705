"""What a downstream consumer does with a dataset's Asset events: two ways to pick the version.

* `read_published(extra)`: the version an event names. Every publish is one
  event, backfills of old dates included, so a consumer that handles each
  event sees every version (e.g. to evaluate each one).
* `read_latest(root)`: the dataset's LATEST, whatever the event: the newest
  version only (e.g. to train on the freshest data). A backfill of an old
  date does not move LATEST, so this reads the same version again.
"""

from __future__ import annotations

from typing import Mapping

from .layout import Dataset


def _count(index_uri: str, version: str) -> dict:
    """Open a version through its wids shard index and count its samples."""
    import wids

    dataset = wids.ShardListDataset(index_uri, transformations=[])
    first = dataset[0]
    print(
        f"version {version}: {len(dataset)} samples in {len(dataset.shards)} shards; "
        f"first sample {first['__key__']!r} has {sorted(k for k in first if not k.startswith('__'))}",
        flush=True,
    )
    return {"version": version, "samples": len(dataset)}


def read_published(extra: Mapping) -> dict:
    """Open the version named by an Asset event's extra through its wids index; count samples."""
    return _count(extra["index"], extra["version"])


def read_latest(root: str) -> dict:
    """Open the dataset's LATEST version (checked against its publish record); count samples."""
    version, _ = Dataset(root).latest()
    return _count(version.index_uri, version.id)
