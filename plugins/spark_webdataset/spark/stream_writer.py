"""The `webdataset` streaming sink: each micro-batch is a batch write, committed once.

Tasks stage shards exactly as a batch write's do. The driver's
`commit(messages, batchId)` is the batch commit (lock, key check against
every earlier batch's keys, shards named after the last committed one,
manifest by compare-and-swap) that also records the batch id under the
query's checkpoint in the manifest. Spark replays a batch whose commit it
did not checkpoint (the driver died in between); that replay finds its id
in the manifest and commits nothing. Only appends: a stream never
rewrites what an earlier batch committed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from pyspark.sql.datasource import DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from .. import fault_points
from ..dataset.changes import APPEND
from ..dataset.commit import StreamBatch, commit_job
from ..dataset.journal import journal_job
from ..errors import BadOption
from .options import StreamOptions
from .writer import WebDatasetCommitMessage, WebDatasetWriter

log = logging.getLogger(__name__)


class WebDatasetStreamWriter(DataSourceStreamArrowWriter):
    def __init__(
        self, options: Mapping[str, str], schema: StructType, overwrite: bool, application_id: str | None = None
    ) -> None:
        if overwrite:
            raise BadOption(
                "webdataset streams append: outputMode('complete') would rewrite committed shards every "
                "batch; use outputMode('append')"
            )
        self.options = StreamOptions.parse(options)
        if self.options.write.change != APPEND:
            raise BadOption(
                f"option change={self.options.write.change!r}: a webdataset stream appends; upsert and delete "
                "are batch writes (write each micro-batch's changes with foreachBatch)"
            )
        # Spark pickles one instance for the tasks and commits with another: both stage and
        # commit through a batch writer, and the commit finds the staged files by the messages.
        self.batch = WebDatasetWriter(self.options.write, schema, overwrite=False, application_id=application_id)

    def write(self, iterator: Iterator[pyarrow.RecordBatch]) -> WebDatasetCommitMessage:  # noqa: F821
        return self.batch.write(iterator)

    def commit(self, messages: list[WebDatasetCommitMessage | None], batchId: int) -> None:
        stream = StreamBatch(self.options.checkpoint, batchId)
        manifest = commit_job(self.batch.commit_request(messages, stream))
        if manifest is not None:
            log.info(
                "webdataset: stream batch %d committed; %s holds %d shards, %d samples",
                batchId,
                self.options.write.path,
                len(manifest.shards),
                manifest.samples,
            )
        fault_points.point("stream:committed", batch=batchId)  # a test kills the driver here: before Spark's checkpoint

    def abort(self, messages: list[WebDatasetCommitMessage | None], batchId: int) -> None:
        """The batch failed before its commit: what its tasks staged goes (late siblings' files
        go with the next writer's sweep of dead jobs)."""
        version = self.batch.version
        if journal_job(version) == self.batch.job_id:
            log.warning("webdataset: stream batch %d failed inside its commit; the next writer finishes it", batchId)
            return  # decided: its staged files finish it (roll forward)
        for message in messages:
            if message is not None:
                version.storage.delete_tree(message.staging)
        log.warning(
            "webdataset: stream batch %d to %s aborted; its staged files removed", batchId, self.options.write.path
        )
