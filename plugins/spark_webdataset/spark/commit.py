"""The driver's commit: the only step that decides what becomes final.

Under the version's commit lock it (1) finishes a commit that died
half-way (its journal), (2) refuses a sealed or published version,
(3) proves the new keys unique among themselves and against the keys the
version holds, (4) on storage that keeps a server-side crc32c (gs://)
checks every staged shard's against the crc32c its task computed while
writing, (5) writes a journal naming every rename and the new
manifest, then (6) applies it: shards get their final names after the
last listed one, the manifest is replaced by compare-and-swap, leftovers
go. An overwrite removes the manifest before its renames, so a reader
sees the old set, the new set, or "not committed", never a mix; a crash
after the journal is finished by the next writer (roll forward).
"""

from __future__ import annotations

import base64
import datetime
import itertools
import json
import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

from ..commit_lock import CommitLock
from ..errors import ChecksumMismatch, ConcurrentCommit, DuplicateKey, FieldMismatch, NotCommitted
from ..format.keys import first_duplicate_in_blocks, merge_blocks
from ..format.manifest import Manifest, ShardEntry, shard_name
from ..layout import KEYS_DIR, Version

if TYPE_CHECKING:
    import pyarrow as pa

    from .writer import WebDatasetCommitMessage, WebDatasetWriter

log = logging.getLogger(__name__)
JOURNAL_KIND = "spark-webdataset-commit-journal-v1"
KEY_BLOCK = 1 << 14
SHARD_PREFIX = "shard-"


def read_key_run(version: Version, path: str) -> Iterator["pa.Array"]:
    import pyarrow as pa

    with version.storage.open_read(path) as stream:
        for batch in pa.ipc.open_stream(stream):
            yield batch.column(0)


@dataclass
class Journal:
    """What a decided commit does; applying it twice does it once."""

    job_id: str
    overwrite: bool
    renames: list[tuple[str, str]]  # staged path -> final name, relative to the version directory
    manifest: bytes

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "__kind__": JOURNAL_KIND,
                "job_id": self.job_id,
                "overwrite": self.overwrite,
                "renames": self.renames,
                "manifest": base64.b64encode(self.manifest).decode(),
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Journal":
        document = json.loads(data)
        return cls(
            job_id=document["job_id"],
            overwrite=document["overwrite"],
            renames=[tuple(pair) for pair in document["renames"]],  # type: ignore[misc]
            manifest=base64.b64decode(document["manifest"]),
        )


def roll_forward(version: Version, lock: CommitLock) -> bool:
    """Finish a commit that died after deciding (its journal is there); True if there was one."""
    storage = version.storage
    data, _ = storage.read_versioned(version.journal_uri)
    if data is None:
        return False
    journal = Journal.from_json(data)
    log.warning("webdataset: finishing the interrupted commit of job %s in %s", journal.job_id, version.uri)
    _apply(version, journal, lock, manifest_token=None, fresh=False, between=lambda: None)
    # Its job is dead (we hold the lock it held): its staging goes too.
    storage.delete_tree(storage.join(version.staging_uri, journal.job_id))
    storage.remove_empty_dir(version.staging_uri)
    return True


def journal_job(version: Version) -> str | None:
    """The job whose decided commit is pending in this version, if any."""
    data, _ = version.storage.read_versioned(version.journal_uri)
    return None if data is None else Journal.from_json(data).job_id


def _apply(
    version: Version,
    journal: Journal,
    lock: CommitLock,
    manifest_token: object,
    fresh: bool,
    between: Callable[[], None],
) -> None:
    storage = version.storage
    if journal.overwrite:
        # From here until the new manifest lands the directory is "not committed".
        if fresh:
            if manifest_token is not None and not storage.delete_if(version.manifest_uri, manifest_token):
                storage.delete(version.journal_uri)
                raise ConcurrentCommit(f"{version.uri}: the manifest changed during the commit (sealed for publishing?)")
        else:
            storage.delete(version.manifest_uri)
        manifest_token = None
    _rename_all(version, journal, lock)
    between()  # test-only faults land here: after the renames, before the manifest
    if fresh:
        if not storage.replace_if(version.manifest_uri, journal.manifest, manifest_token):
            storage.delete(version.journal_uri)
            raise ConcurrentCommit(f"{version.uri}: the manifest changed during the commit (sealed for publishing?)")
    else:
        storage.write_atomic(version.manifest_uri, journal.manifest)
    manifest = Manifest.from_json(journal.manifest)
    listed = {shard.name for shard in manifest.shards}
    for name in storage.list_sizes(version.uri):
        if name.startswith(SHARD_PREFIX) and name.endswith(".tar") and name not in listed:
            storage.delete(version.path(name))
    keep = manifest.key_run.rsplit("/", 1)[-1] if manifest.key_run else None
    for name in storage.list_sizes(version.keys_uri):
        if name != keep:
            storage.delete(storage.join(version.keys_uri, name))
    storage.delete(version.journal_uri)


def _rename_one(version: Version, journal: Journal, staged: str, final: str) -> None:
    """Give one staged file its final name; done already (source gone, target there) is fine."""
    storage = version.storage
    source, target = version.path(staged), version.path(final)
    try:
        storage.rename(source, target)  # the common case costs no existence check
    except Exception:
        if storage.exists(source):
            raise
        if not storage.exists(target):
            raise NotCommitted(
                f"{version.uri}: cannot finish the commit of job {journal.job_id}: {staged} is gone"
            ) from None
        # renamed already: by a commit that died after this rename (roll forward), or a retry


def _rename_all(version: Version, journal: Journal, lock: CommitLock) -> None:
    """Every rename of the journal, `storage.rename_threads` at a time (a rename on gs:// is a
    server-side rewrite and a delete: latency, not bandwidth). The calling thread renews the lock
    as renames finish; the first failure stops submitting, lets those in flight end, and is
    raised: the journal stays, and the next committer finishes what is left."""
    renames = journal.renames
    threads = max(1, min(version.storage.rename_threads, len(renames)))
    if threads == 1:
        for staged, final in renames:
            _rename_one(version, journal, staged, final)
            lock.renew()
        return
    window = 4 * threads  # submitted but not finished: bounded, so a failure stops the rest quickly
    pending: set[Future[None]] = set()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webdataset-rename") as pool:
        try:
            for staged, final in renames:
                if len(pending) >= window:
                    pending = _settle(pending, lock)
                pending.add(pool.submit(_rename_one, version, journal, staged, final))
            while pending:
                pending = _settle(pending, lock)
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _settle(pending: set["Future[None]"], lock: CommitLock) -> set["Future[None]"]:
    """Wait for at least one rename to end; raise the first failure; renew the lease."""
    done, rest = wait(pending, return_when=FIRST_COMPLETED)
    for future in done:
        future.result()
    lock.renew()
    return rest


def _test_fault(writer: "WebDatasetWriter") -> Callable[[], None]:
    """Test-only (options _testFault=exit:commit, _testCommitPause=S): act between the renames and the manifest."""
    import os

    def fault() -> None:
        if writer.options.test_commit_pause:
            time.sleep(writer.options.test_commit_pause)
        if writer.options.test_fault == "exit:commit":
            os._exit(17)  # the driver's commit process dies inside the commit

    return fault


@dataclass(frozen=True)
class StreamBatch:
    """One micro-batch of a streaming query: the manifest records, per checkpoint, the last
    batch committed, so a batch that Spark replays after a restart commits nothing twice."""

    checkpoint: str
    batch_id: int

    def committed_in(self, manifest: Manifest) -> bool:
        last = manifest.run.get(STREAMS_KEY, {}).get(self.checkpoint)
        return last is not None and int(last) >= self.batch_id


STREAMS_KEY = "streams"  # manifest run section: {checkpoint location: last committed batch id}


def commit_job(
    writer: "WebDatasetWriter", messages: list["WebDatasetCommitMessage"], stream: StreamBatch | None = None
) -> Manifest | None:
    """Make the tasks' staged shards final, or raise with nothing of them visible; the version's
    manifest after the commit (None: a stream's empty first batch left no manifest)."""
    version = Version.at(writer.options.path)
    messages = sorted(messages, key=lambda m: m.partition)
    decided = False
    try:
        with CommitLock(version, writer.job_id, lease_seconds=writer.options.commit_lease_seconds) as lock:
            roll_forward(version, lock)
            version.check_writable()
            manifest_bytes, token = version.read_manifest_bytes()
            token = None if manifest_bytes is None else token  # None: "no manifest yet" on every storage
            if writer.options.test_commit_delay:
                time.sleep(writer.options.test_commit_delay)  # test-only: make two commits overlap
            existing = None if writer.overwrite or manifest_bytes is None else Manifest.from_json(manifest_bytes)
            if stream is not None and existing is not None and stream.committed_in(existing):
                log.warning(
                    "webdataset: batch %d of the stream checkpointed at %s is in %s already "
                    "(replayed after a restart): its output is dropped",
                    stream.batch_id, stream.checkpoint, version.uri,
                )
                return existing
            if stream is not None and not any(message.shards for message in messages):
                return existing  # an empty micro-batch: nothing to name, nothing to record
            if existing is not None and [f["name"] for f in existing.fields] != [f["name"] for f in writer.fields]:
                raise FieldMismatch(
                    f"append to {version.uri}: the DataFrame's fields {[f['name'] for f in writer.fields]} differ "
                    f"from the version's {[f['name'] for f in existing.fields]}"
                )
            key_run = _merge_keys(version, writer, messages, existing)
            lock.renew()
            journal = _plan(version, writer, messages, existing, key_run, stream)
            _check_uploads(version, messages, journal)
            version.storage.write_atomic(version.journal_uri, journal.to_json())
            decided = True
            _apply(version, journal, lock, token, fresh=True, between=_test_fault(writer))
            decided = False
    finally:
        # A decided commit that failed half-way keeps its staged files: the next job finishes it.
        if not decided:
            _remove_foreign_staging(writer, messages)
            writer.remove_own_staging()
    manifest = Manifest.from_json(journal.manifest)
    log.info(
        "webdataset: committed %d shards, %d samples, %d bytes to %s",
        len(manifest.shards),
        manifest.samples,
        manifest.bytes,
        version.uri,
    )
    return manifest


def _remove_foreign_staging(writer: "WebDatasetWriter", messages: list["WebDatasetCommitMessage"]) -> None:
    """A stream's tasks stage under the job of the writer Spark pickled for them, not under the
    committing writer's: each message's directory goes by name (what is left after the renames,
    or all of a batch that was dropped or refused)."""
    storage = Version.at(writer.options.path).storage
    own = writer.staging_root.rstrip("/") + "/"
    for message in messages:
        if not message.staging.startswith(own):
            storage.delete_tree(message.staging)


def _merge_keys(
    version: Version,
    writer: "WebDatasetWriter",
    messages: list["WebDatasetCommitMessage"],
    existing: Manifest | None,
) -> str:
    """Merge the tasks' sorted key runs (and the version's, on append) into one run; raise on a duplicate."""
    import pyarrow as pa

    sources: list[str] = []
    owners: list[str] = []
    if existing is not None and existing.key_run:
        sources.append(version.path(existing.key_run))
        owners.append(f"the version's {len(existing.shards)} committed shard(s)")
    for message in messages:
        if message.keys_path:
            sources.append(message.keys_path)
            owners.append(f"partition {message.partition}")
    serial = int(existing.key_run.rsplit("/", 1)[-1].split(".")[0]) + 1 if existing and existing.key_run else 0
    staged = version.storage.join(writer.staging_root, f"keys-{serial:06d}.arrow")
    schema = pa.schema([("key", pa.large_string())])
    pending: list[pa.Array] = []
    buffered = 0

    def write(blocks: list[pa.Array]) -> None:
        if blocks:
            keys = pa.concat_arrays(blocks)
            for start in range(0, len(keys), KEY_BLOCK):
                ipc.write_batch(pa.record_batch([keys.slice(start, KEY_BLOCK)], schema=schema))

    with version.storage.open_write(staged) as stream, pa.ipc.new_stream(stream, schema) as ipc:
        runs = _started_together([read_key_run(version, path) for path in sources], version.storage.rename_threads)
        blocks = merge_blocks(runs)
        for keys, found in first_duplicate_in_blocks(blocks):
            if found:
                key, first, second = found
                raise DuplicateKey(
                    f"duplicate sample key {key!r} in {owners[first]} and {owners[second]} of {version.uri}: "
                    "a key may appear only once in a version"
                )
            pending.append(keys)
            buffered += len(keys)
            if buffered >= KEY_BLOCK:  # many runs give many small merged blocks: write them together
                write(pending)
                pending, buffered = [], 0
        write(pending)
    return staged


def _started_together(runs: list[Iterator["pa.Array"]], threads: int) -> list[Iterator["pa.Array"]]:
    """Each run opened and its first block read, `threads` at a time: the merge needs every
    run's first block before its first round, and on gs:// each costs round trips (memory is
    the same: one block per run)."""
    if threads <= 1 or len(runs) <= 1:
        return runs

    def start(run: Iterator["pa.Array"]) -> Iterator["pa.Array"]:
        first = next(run, None)
        return iter(()) if first is None else itertools.chain([first], run)

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webdataset-keys") as pool:
        return list(pool.map(start, runs))


def _plan(
    version: Version,
    writer: "WebDatasetWriter",
    messages: list["WebDatasetCommitMessage"],
    existing: Manifest | None,
    staged_keys: str,
    stream: StreamBatch | None = None,
) -> Journal:
    kept = list(existing.shards) if existing else []
    renames: list[tuple[str, str]] = []
    entries: list[ShardEntry] = []
    for message in messages:
        for shard in message.shards:
            name = shard_name(len(kept) + len(entries))
            renames.append((_relative(version, version.storage.join(message.staging, f"{shard.sequence:06d}.tar")), name))
            entries.append(
                ShardEntry(
                    name=name,
                    samples=shard.samples,
                    bytes=shard.bytes,
                    crc32c=shard.crc32c,
                    sha256=shard.sha256,
                    first_key=shard.first_key,
                    last_key=shard.last_key,
                    keys_ascending=message.keys_ascending,
                )
            )
    key_run = f"{KEYS_DIR}/{staged_keys.rsplit('/', 1)[-1][len('keys-'):]}"
    renames.append((_relative(version, staged_keys), key_run))
    previous_run = dict(existing.run) if existing else {}
    streams = dict(previous_run.get(STREAMS_KEY, {}))
    if stream is not None:
        streams[stream.checkpoint] = stream.batch_id
    manifest = Manifest(
        shards=kept + entries,
        fields=writer.fields,
        options=writer.options.manifest_options(),
        key_run=key_run,
        run={
            "spark_application_id": writer.application_id,
            "job_id": writer.job_id,
            "mode": "overwrite" if writer.overwrite else "append",
            "commits": int(previous_run.get("commits", 0)) + 1,
            "committed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "oversize_samples": list(previous_run.get("oversize_samples", []))
            + [shard.first_key for message in messages for shard in message.shards if shard.oversize],
            **({STREAMS_KEY: streams} if streams else {}),
        },
    )
    return Journal(writer.job_id, writer.overwrite, renames, manifest.to_json())


def _check_uploads(version: Version, messages: list["WebDatasetCommitMessage"], journal: Journal) -> None:
    """End-to-end integrity at the cost of one listing per job directory the tasks staged in: every
    staged shard's server-side crc32c (gs://) must be the crc32c its task computed over the bytes it
    wrote. A mismatch fails the commit before anything is decided; the staged files go with the job."""
    storage = version.storage
    # a batch write's tasks stage below the writer's job; a stream's below the job of the writer
    # Spark pickled for its tasks, which is not the committing one
    roots = sorted({message.staging.rsplit("/", 1)[0] for message in messages})
    stored: dict[str, str | None] = {}
    for root in roots:
        below = storage.crc32c_below(root)
        if below is None:
            return  # local files: the server keeps no checksum, and reading them again is validation's job
        stored.update({f"{root.rstrip('/')}/{relative}": crc for relative, crc in below.items()})
    written = {shard.name: shard.crc32c for shard in Manifest.from_json(journal.manifest).shards}
    for staged, final in journal.renames:
        if final not in written:
            continue  # the key run: not a shard
        path = version.path(staged)
        server = stored.get(path)
        if server != written[final]:
            raise ChecksumMismatch(
                f"{version.uri}: shard {final} (staged as {path}) has crc32c {server} on the server, but the "
                f"task computed {written[final]} over the bytes it wrote: the upload is corrupt; write again"
            )


def _relative(version: Version, path: str) -> str:
    prefix = version.uri.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path} is not inside {version.uri}")
    return path[len(prefix) :]
