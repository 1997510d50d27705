"""The driver's commit: prove keys unique, name shards in partition order, write the manifest last."""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Iterator

from ..format.keys import first_duplicate
from ..format.manifest import MANIFEST_NAME, Manifest, ShardEntry, shard_name
from ..format.names import WebDatasetError
from ..storage import Storage, storage_for

if TYPE_CHECKING:
    from .writer import WebDatasetCommitMessage, WebDatasetWriter

log = logging.getLogger(__name__)


def _keys(storage: Storage, path: str) -> Iterator[str]:
    import pyarrow as pa

    with storage.open_read(path) as stream:
        for batch in pa.ipc.open_stream(stream):
            yield from batch.column(0).to_pylist()


def read_manifest(storage: Storage, directory: str) -> Manifest | None:
    path = storage.join(directory, MANIFEST_NAME)
    if not storage.exists(path):
        return None
    return Manifest.from_json(storage.read_bytes(path))


def commit_job(writer: "WebDatasetWriter", messages: list["WebDatasetCommitMessage"]) -> Manifest:
    options = writer.options
    storage = storage_for(options.path)
    messages = sorted(messages, key=lambda m: m.partition)
    try:
        duplicate = first_duplicate(_keys(storage, m.keys_path) for m in messages if m.keys_path)
        if duplicate:
            key, first, second = duplicate
            raise WebDatasetError(
                f"duplicate sample key {key!r} in partitions {messages[first].partition} and "
                f"{messages[second].partition}: a key may appear only once in a dataset"
            )
        existing = None if writer.overwrite else read_manifest(storage, options.path)
        if existing is not None and existing.fields != writer.fields:
            raise WebDatasetError(
                f"append to {options.path}: the DataFrame's fields {writer.fields} differ from the "
                f"manifest's {existing.fields}"
            )
        manifest = _finalize(storage, writer, messages, existing)
    finally:
        writer.remove_staging()
    log.info(
        "webdataset: committed %d shards, %d samples, %d bytes to %s",
        len(manifest.shards),
        manifest.samples,
        manifest.bytes,
        options.path,
    )
    return manifest


def _finalize(
    storage: Storage,
    writer: "WebDatasetWriter",
    messages: list["WebDatasetCommitMessage"],
    existing: Manifest | None,
) -> Manifest:
    directory = writer.options.path
    kept = list(existing.shards) if existing else []
    if writer.overwrite:
        # No manifest while the shards switch: the directory is "not written"
        # rather than a manifest that disagrees with its files.
        storage.delete(storage.join(directory, MANIFEST_NAME))
    entries: list[ShardEntry] = []
    for message in messages:
        for shard in message.shards:
            name = shard_name(len(kept) + len(entries))
            storage.rename(storage.join(message.staging, f"{shard.sequence:06d}.tar"), storage.join(directory, name))
            entries.append(
                ShardEntry(
                    name=name,
                    samples=shard.samples,
                    bytes=shard.bytes,
                    sha256=shard.sha256,
                    first_key=shard.first_key,
                    last_key=shard.last_key,
                )
            )
    shards = kept + entries
    listed = {shard.name for shard in shards}
    for name in storage.list_sizes(directory):
        if name.startswith("shard-") and name.endswith(".tar") and name not in listed:
            storage.delete(storage.join(directory, name))
    manifest = Manifest(
        shards=shards,
        fields=writer.fields,
        options=writer.options.manifest_options(),
        run={
            "spark_application_id": writer.application_id,
            "job_id": writer.job_id,
            "mode": "overwrite" if writer.overwrite else "append",
            "committed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "oversize_samples": [
                shard.first_key for message in messages for shard in message.shards if shard.oversize
            ],
        },
    )
    storage.write_atomic(storage.join(directory, MANIFEST_NAME), manifest.to_json())
    return manifest
