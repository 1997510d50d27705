"""What a downstream consumer does with a dataset's Asset events: two ways to pick the version.

* `read_published(extra)`: the version an event names. Every publish is one
  event, backfills of old dates included, so a consumer that handles each
  event sees every version (e.g. to evaluate each one).
* `read_latest(root)`: the dataset's LATEST, whatever the event: the newest
  version only (e.g. to train on the freshest data). A backfill of an old
  date does not move LATEST, so this reads the same version again.

Both open the version with wids (`wids.ShardListDataset(index_uri)`) on any
storage: wids copies local shards into its cache itself; for gs:// it would
shell out to `gsutil cp` (absent on most workers, blind to
STORAGE_EMULATOR_HOST; a consumer task on it was found hung), so `wids_for_gcs()`
hands wids a gs:// download handler that reads through our Storage instead
(ADC or the emulator, bounded retries). Streaming readers (webdataset.WebDataset)
open gs:// shards as `pipe:spark-webdataset cat gs://...`.
"""

from __future__ import annotations

import os
import shutil
from typing import Mapping

from ..dataset.layout import Dataset

_COPY_CHUNK_BYTES = 1 << 20


def _download_through_storage(remote: str, local: str) -> None:
    """wids' download handler for gs://: the object, read through our Storage, into wids' cache
    file `local`, whole or not at all (a failed copy leaves no partial file wids would reuse)."""
    from ..storage import storage_for

    partial = f"{local}.{os.getpid()}.part"
    try:
        with storage_for(remote).open_read(remote) as stream, open(partial, "wb") as out:
            shutil.copyfileobj(stream, out, _COPY_CHUNK_BYTES)
        os.replace(partial, local)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def wids_for_gcs():
    """The wids module, its gs:// downloads (index and shards) going through our Storage, not gsutil.

    wids looks a URL's scheme up in `wids.wids_dl.default_cmds` (command templates, or callables
    taking the remote URL and the local cache path); this sets its "gs" entry, for the process."""
    import wids
    from wids import wids_dl

    wids_dl.default_cmds["gs"] = _download_through_storage
    return wids


def _count(index_uri: str, version: str) -> dict:
    """Open a version through its wids shard index and count its samples."""
    wids = wids_for_gcs()

    dataset = wids.ShardListDataset(index_uri, transformations=[])
    try:
        first = dataset[0]
    finally:
        dataset.close()  # wids keeps its shards open in an LRU
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
