"""The `webdataset` Arrow writer: tasks stage shards, the driver's commit names them.

Each task attempt writes under its own staging directory and reports what
it wrote in a commit message; only attempts whose message reaches the
driver are kept. `commit()` alone decides what becomes final (see
`dataset/commit.py`); `abort()` and the next job remove everything staged.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, List, Optional

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    MapType,
    NullType,
    NumericType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..errors import BadOption, InvalidField, NotCommitted
from ..format.names import KEY_COLUMN, check_fields, field_name_error
from ..format.shard_writer import ShardInfo
from ..dataset.layout import STAGED_INDEX_NAME, WRITER_MARK, Version, staged_shard_name
from ..dataset.changes import APPEND, DELETE
from .options import LATEST_PARENT, WriteOptions
from ..dataset.staging import (
    clean_dead_staging,
    job_ended,
    mark_aborted,
    remove_staged_files,
    remove_staging,
    remove_task_staging,
    write_lease,
)
from .. import fault_points

if TYPE_CHECKING:
    import pyarrow

    from ..dataset.commit import CommitRequest
    from ..storage.base import Storage

log = logging.getLogger(__name__)

_ENCODABLE = (
    BinaryType,
    StringType,
    NumericType,
    BooleanType,
    DateType,
    TimestampType,
    TimestampNTZType,
    StructType,
    MapType,
    ArrayType,
    NullType,
)


@dataclass
class WebDatasetCommitMessage(WriterCommitMessage):
    """What one successful task attempt staged."""

    partition: int
    attempt: int
    task_attempt_id: int
    staging: str
    shards: list[ShardInfo] = field(default_factory=list)
    index_path: str | None = None  # its sample index rows, sorted by key (format.sample_index.TASK_SCHEMA)
    keys_ascending: bool = False  # the task got its keys in ascending order
    deleted_rows: int = 0  # a delete's task: the rows it got (its run holds each key once)

    @property
    def samples(self) -> int:
        return sum(shard.samples for shard in self.shards)


def check_schema(schema: StructType, allow_pax: bool = False) -> list[dict[str, str]]:
    """Fields (name, Spark type) in column order; raises on anything we cannot write."""
    names = check_fields([f.name for f in schema.fields])
    for name in names:
        problem = field_name_error(name, allow_pax)
        if problem:
            raise InvalidField(f"column {name!r}: {problem}")
    by_name = {f.name: f for f in schema.fields}
    key_type = by_name[KEY_COLUMN].dataType
    if not isinstance(key_type, StringType):
        raise InvalidField(
            f"column {KEY_COLUMN!r} has type {key_type.simpleString()}; the key must be a string "
            f"(cast it: df.withColumn({KEY_COLUMN!r}, col({KEY_COLUMN!r}).cast('string')))"
        )
    fields = []
    for name in names:
        data_type: DataType = by_name[name].dataType
        if not isinstance(data_type, _ENCODABLE):
            raise InvalidField(
                f"column {name!r} has type {data_type.simpleString()}, which webdataset cannot encode "
                "(use binary, string, numbers, boolean, date, timestamp, struct, map or array)"
            )
        fields.append({"name": name, "type": data_type.simpleString(), "nullable": by_name[name].nullable})
    return fields


def check_key_schema(schema: StructType) -> list[dict[str, str]]:
    """A delete's input: a string `__key__` (any other column is not read)."""
    by_name = {f.name: f for f in schema.fields}
    if KEY_COLUMN not in by_name:
        raise InvalidField(f"a delete needs a {KEY_COLUMN!r} column with the keys to remove (got {list(by_name)})")
    key_type = by_name[KEY_COLUMN].dataType
    if not isinstance(key_type, StringType):
        raise InvalidField(f"column {KEY_COLUMN!r} has type {key_type.simpleString()}; the key must be a string")
    return [{"name": KEY_COLUMN, "type": "string", "nullable": by_name[KEY_COLUMN].nullable}]


def _stage_index_run(
    storage: Storage, staging: str, rows: pyarrow.RecordBatch, before: Callable[[], None] = lambda: None
) -> str | None:
    """A task's sorted index rows, staged beside its shards (`before` runs first: the task's check
    of its job); None for an empty partition, which stages nothing."""
    if not len(rows):
        return None
    from ..format.sample_index import write_task_run

    before()
    path = storage.join(staging, STAGED_INDEX_NAME)
    with storage.open_write(path) as stream:
        write_task_run(rows, stream)
    return path


class WebDatasetWriter(DataSourceArrowWriter):
    def __init__(
        self, options: WriteOptions, schema: StructType, overwrite: bool, application_id: str | None = None
    ) -> None:
        self.options = options
        self.fields = check_key_schema(schema) if options.change == DELETE else check_schema(schema, options.allow_pax)
        self.overwrite = overwrite
        self.job_id = uuid.uuid4().hex
        self.application_id = application_id
        version = self.version
        # Refuse before a byte is written; a commit that died half-way is finished first.
        version.check_writable()
        if version.storage.exists(version.journal_uri):
            from ..dataset.lock import CommitLock
            from ..dataset.journal import roll_forward

            with CommitLock(version, self.job_id, lease_seconds=options.commit_lease_seconds) as lock:
                roll_forward(version, lock)
        self.parent = self._parent(version)
        if self.parent is None and options.change == DELETE:
            raise BadOption(
                f"option change=delete: {version.uri} has no published parent to delete from "
                f"(parent={options.parent!r})"
            )
        # What this job creates (the version directory, `versions/`, a new root): a failed write removes it again.
        self.created_dirs = version.storage.missing_dirs(version.uri)
        if not version.storage.exists(version.mark_uri):
            version.storage.write_atomic(version.mark_uri, WRITER_MARK)
        clean_dead_staging(version, self.job_id)
        write_lease(version, self.job_id)
        from ..dataset.commit import Base

        # What an overwrite, upsert or delete plans against: its commit fails (ConcurrentCommit)
        # if another commit lands in between, instead of silently replacing it.
        self.base = Base.read(version)

    @property
    def version(self) -> Version:
        return Version.at(self.options.path)

    def _parent(self, version: Version) -> str | None:
        """The parent version id, LATEST resolved now (on the driver, once): None when the option is
        absent, or is LATEST of a root that has published nothing yet (the first build is full)."""
        wanted = self.options.parent
        if wanted is None:
            return None
        if version.dataset is None or version.id is None:
            raise BadOption(f"option parent={wanted!r} needs a version directory ROOT/versions/ID, not {version.uri}")
        parent = version.dataset.read_latest() if wanted == LATEST_PARENT else wanted
        if parent is None:
            log.info("webdataset: %s has no published version yet: %s is a full build", version.dataset.root, version.id)
            return None
        if parent == version.id:
            raise BadOption(f"option parent={wanted!r}: version {version.id!r} cannot be built on itself")
        if version.dataset.read_record(parent) is None:
            raise BadOption(f"option parent={wanted!r}: version {parent!r} of {version.dataset.root} is not published")
        version.dataset.published(parent)  # and its manifest is the one published
        return parent

    @property
    def staging_root(self) -> str:
        """Every attempt of this job stages below here."""
        version = self.version
        return version.storage.join(version.staging_uri, self.job_id)

    def remove_own_staging(self) -> None:
        remove_staging(self.version, self.job_id)

    def _check_job(self, staging: str, partition: int, attempt: int, staging_next: bool = True) -> None:
        """A task's check before it stages a file (`staging_next`) and after its last one: if its job
        was aborted meanwhile, what it staged goes and the task fails, so nothing of a failed job
        outlives it, whatever the timing (Spark's abort() may run while a sibling task still stages)."""
        version = self.version
        if job_ended(version, self.job_id):
            remove_task_staging(version, self.job_id, staging)
            raise NotCommitted(
                f"{version.uri}: job {self.job_id} was aborted while partition {partition} (attempt {attempt}) "
                "was staging; its staged files are removed"
            )
        if staging_next:
            fault_points.point("task:staging-file", partition=partition, attempt=attempt)  # a test holds a task here

    # -- executors --------------------------------------------------------

    def write(self, iterator: Iterator["pyarrow.RecordBatch"]) -> WebDatasetCommitMessage:  # noqa: F821
        from pyspark import TaskContext

        from ..format.encode import encode_column
        from ..format.keys import sort_run
        from ..format.sample_index import TASK_SCHEMA, concat_rows
        from ..format.shard_writer import ShardWriter

        context = TaskContext.get()
        partition = context.partitionId() if context else 0
        attempt = context.attemptNumber() if context else 0
        task_attempt_id = context.taskAttemptId() if context else 0
        storage = self.version.storage
        staging = storage.join(self.staging_root, f"p{partition:05d}-a{attempt}-t{task_attempt_id}")
        if self.options.change == DELETE:
            return self._stage_deletions(iterator, staging, partition, attempt, task_attempt_id)
        names = [f["name"] for f in self.fields]

        def open_shard(sequence: int):
            self._check_job(staging, partition, attempt)
            return storage.open_write(storage.join(staging, staged_shard_name(sequence)))

        writer = ShardWriter(
            names,
            open_shard,
            max_shard_bytes=self.options.max_shard_bytes,
            max_samples_per_shard=self.options.max_samples_per_shard,
            mtime=self.options.mtime,
            allow_pax=self.options.allow_pax,
            checksum=self.options.checksum,
        )
        try:
            for batch in iterator:
                columns = [encode_column(batch.column(name), name) for name in names]
                writer.write_batch(batch.column(KEY_COLUMN), columns)
                fault_points.point("task:batch-written", partition=partition, attempt=attempt)
            shards = writer.close()
            rows, ascending = sort_run(concat_rows(writer.index_rows, TASK_SCHEMA))
            index_path = _stage_index_run(storage, staging, rows, lambda: self._check_job(staging, partition, attempt))
            if shards or index_path:
                self._check_job(staging, partition, attempt, staging_next=False)
        except BaseException:
            writer.discard()
            remove_task_staging(self.version, self.job_id, staging)
            raise
        return WebDatasetCommitMessage(
            partition=partition,
            attempt=attempt,
            task_attempt_id=task_attempt_id,
            staging=staging,
            shards=shards,
            index_path=index_path,
            keys_ascending=ascending,
        )

    def _stage_deletions(
        self, iterator: Iterator["pyarrow.RecordBatch"], staging: str, partition: int, attempt: int, task_attempt_id: int  # noqa: F821
    ) -> WebDatasetCommitMessage:
        """A delete's task: its keys, sorted and once each, as an index run without shards (the
        commit looks them up in the parent's index)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from ..format.sample_index import task_rows

        keys = pa.chunked_array([batch.column(KEY_COLUMN) for batch in iterator], pa.string()).combine_chunks()
        if keys.null_count:
            row = pc.index(pc.is_null(keys), True).as_py()
            raise InvalidField(f"partition {partition}, row {row}: {KEY_COLUMN} is null; a delete needs the key of every row")
        given = len(keys)
        keys = pc.unique(keys)
        keys = keys.take(pc.sort_indices(keys))
        zeros = [0] * len(keys)
        storage = self.version.storage
        try:
            before = lambda: self._check_job(staging, partition, attempt)  # noqa: E731
            index_path = _stage_index_run(storage, staging, task_rows(keys, 0, zeros, zeros, zeros), before)
            if index_path:
                self._check_job(staging, partition, attempt, staging_next=False)
        except BaseException:
            remove_task_staging(self.version, self.job_id, staging)
            raise
        log.info("webdataset: partition %d stages %d key(s) to delete (%d rows)", partition, len(keys), given)
        return WebDatasetCommitMessage(
            partition=partition, attempt=attempt, task_attempt_id=task_attempt_id, staging=staging, index_path=index_path,
            deleted_rows=given,
        )  # fmt: skip

    # -- driver -----------------------------------------------------------

    def commit_request(self, messages: List[Optional[WebDatasetCommitMessage]], stream=None) -> "CommitRequest":
        """The plain value the commit protocol takes (it knows nothing of Spark)."""
        from ..dataset.commit import CommitRequest

        return CommitRequest(
            version_uri=self.options.path,
            job_id=self.job_id,
            overwrite=self.overwrite,
            fields=self.fields,
            options=self.options.manifest_options(),
            attempts=[m for m in messages if m is not None],
            application_id=self.application_id,
            lease_seconds=self.options.commit_lease_seconds,
            stream=stream,
            parent=self.parent,
            change=self.options.change if self.parent is not None else APPEND,  # no parent: a full build
            base=self.base,
        )

    def commit(self, messages: List[Optional[WebDatasetCommitMessage]]) -> None:
        from ..dataset.commit import commit_job

        commit_job(self.commit_request(messages))

    def abort(self, messages: List[Optional[WebDatasetCommitMessage]]) -> None:
        """Nothing of the job stays, whatever the timing: the job is marked aborted before its
        staging is swept, so a sibling task still staging removes its own files when it checks
        (after each file), and the next writer removes a killed task's files at once."""
        from ..dataset.journal import journal_job

        version = self.version
        if journal_job(version) == self.job_id:
            # Our commit was decided and failed half-way: its staged files finish it later.
            log.warning("webdataset write to %s failed inside its commit; the next write finishes it", self.options.path)
            return
        storage = version.storage
        # A task without a message failed or may still be running; with every message in, every task ended.
        tasks_may_run = not messages or any(message is None for message in messages)
        others = [job for job in storage.list_dirs(version.staging_uri) if job != self.job_id]
        fresh = not others and not any(storage.exists(p) for p in (version.manifest_uri, version.journal_uri))
        if fresh:
            # A write that never committed into a fresh directory leaves nothing, not even our mark;
            # the mark goes first: a task that then finds no lease and no mark knows the job ended.
            storage.delete(version.mark_uri)
            self.remove_own_staging()
            storage.remove_empty_dir(version.uri)
            for directory in self.created_dirs:  # deepest first; each only if empty (another job may use it)
                storage.remove_empty_dir(directory)
        elif tasks_may_run:
            mark_aborted(version, self.job_id)
            remove_staged_files(version, self.job_id)  # the lease stays, saying aborted, for late tasks
        else:
            self.remove_own_staging()
        fault_points.point("writer:aborted")  # a test releases a held sibling task here
        log.warning("webdataset write to %s aborted; staged files removed", self.options.path)
