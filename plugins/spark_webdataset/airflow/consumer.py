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
STORAGE_EMULATOR_HOST; a consumer task on it was found hung) and for s3:// to
`aws s3 cp` (absent on most training nodes, with its own endpoint settings), so
`wids_through_storage()` hands wids gs:// and s3:// download handlers that read
through our Storage instead (ADC or the emulator; the AWS variables and
AWS_ENDPOINT_URL; bounded retries). It also gives webdataset.WebDataset an
in-process opener for both schemes; `pipe:spark-webdataset cat URL` works too.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Mapping

from ..dataset.layout import Dataset

_COPY_CHUNK_BYTES = 1 << 20


STORAGE_SCHEMES = ("gs", "s3")  # the cloud schemes our Storage serves (local paths wids copies itself)


def _download_through_storage(remote: str, local: str) -> None:
    """wids' download handler for gs:// and s3://: the object, read through our Storage, into wids' cache
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


def _open_through_storage(url: str, mode: str = "rb", bufsize: int = 8192, **_: object):
    """webdataset's opener (`gopen_schemes`) for gs:// and s3://: a buffered stream of ranged reads
    through our Storage (webdataset's own gs:// opener runs gsutil; it has none for s3://)."""
    from ..errors import InputError
    from ..storage import storage_for

    if mode != "rb":
        raise InputError(
            f"{url}: webdataset may only read through our storage (mode {mode!r}); write with the data source"
        )
    return storage_for(url).open_read(url)


def wids_through_storage():
    """The wids module, its gs:// and s3:// downloads (index and shards) going through our Storage,
    not gsutil or the aws CLI; webdataset's gopen reads both schemes through it too.

    wids looks a URL's scheme up in `wids.wids_dl.default_cmds` (command templates, or callables
    taking the remote URL and the local cache path); webdataset in `webdataset.gopen.gopen_schemes`.
    This sets their "gs" and "s3" entries, for the process."""
    import wids
    from wids import wids_dl

    for scheme in STORAGE_SCHEMES:
        wids_dl.default_cmds[scheme] = _download_through_storage
    try:  # the module: webdataset's package re-exports a function of the same name
        gopen = importlib.import_module("webdataset.gopen")
    except ImportError:  # wids without webdataset: nothing to register
        return wids
    for scheme in STORAGE_SCHEMES:
        gopen.gopen_schemes[scheme] = _open_through_storage
    return wids


def _count(index_uri: str, version: str) -> dict:
    """Open a version through its wids shard index and count its samples."""
    wids = wids_through_storage()

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
