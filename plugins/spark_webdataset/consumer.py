"""What a downstream consumer does with a published version's Asset event."""

from __future__ import annotations

from typing import Mapping


def read_published(extra: Mapping) -> dict:
    """Open the version named by an Asset event's extra through its wids index; count samples."""
    import wids

    dataset = wids.ShardListDataset(extra["index"], transformations=[])
    first = dataset[0]
    print(
        f"version {extra['version']}: {len(dataset)} samples in {extra['shards']} shards; "
        f"first sample {first['__key__']!r} has {sorted(k for k in first if not k.startswith('__'))}",
        flush=True,
    )
    return {"version": extra["version"], "samples": len(dataset)}
