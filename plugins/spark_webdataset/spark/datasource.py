"""The `webdataset` Spark data source (Python Data Source API, Spark 4)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from .options import WriteOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class WebDatasetDataSource(DataSource):
    """`df.write.format("webdataset").save(uri)`, `spark.read.format("webdataset").load(uri)` and
    `df.writeStream.format("webdataset").option("checkpointLocation", c).start(uri)`.

    See docs/writing-and-reading.md, "Writing" and "Reading"; docs/design.md, "The commit protocol".
    """

    application_id: str | None = None

    @classmethod
    def name(cls) -> str:
        return "webdataset"

    def schema(self) -> StructType:
        from .options import ReadOptions
        from .reader import default_schema

        return default_schema(ReadOptions.parse(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        from .options import ReadOptions
        from .reader import WebDatasetReader

        return WebDatasetReader(ReadOptions.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import WebDatasetWriter

        return WebDatasetWriter(WriteOptions.parse(self.options), schema, overwrite, self.application_id)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .stream_writer import WebDatasetStreamWriter

        return WebDatasetStreamWriter(self.options, schema, overwrite, self.application_id)


def _activate(spark: Any) -> None:
    """Make `spark` the JVM's active session in the calling thread (as createDataFrame does)."""
    from pyspark.sql import SparkSession

    jvm_session = getattr(SparkSession, "_get_j_spark_session_class", None)
    sessions = jvm_session(spark._jvm) if jvm_session else spark._jvm.org.apache.spark.sql.SparkSession
    sessions.setActiveSession(spark._jsparkSession)


def _activating(format_method: Any) -> Any:
    @functools.wraps(format_method)
    def format(self: Any, source: str) -> Any:  # noqa: A001 - pyspark's own name
        if isinstance(source, str) and source.lower() == WebDatasetDataSource.name():
            _activate(self._spark)
        return format_method(self, source)

    format.activates_webdataset = True  # type: ignore[attr-defined]
    return format


def _active_in_every_thread() -> None:
    """Spark finds a Python data source by name through the JVM thread's *active* session
    (`DataSource.lookupDataSource` asks `SparkSession.getActiveSession`, a thread-local), and each
    Python thread talks to a JVM thread of its own (py4j's pinned threads) that has none until
    something sets it: `format("webdataset")` from a second Python thread failed with
    DATA_SOURCE_NOT_FOUND although the session had it registered. So, once per process, the
    classic readers' and writers' `format()` make their own session active in the calling thread
    when the format is ours. Spark Connect needs nothing: the server sets the session per request."""
    try:
        from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
        from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter
    except ImportError:  # pyspark-client (Connect only): no classic classes
        return
    for cls in (DataFrameReader, DataFrameWriter, DataStreamReader, DataStreamWriter):
        if not getattr(cls.format, "activates_webdataset", False):
            cls.format = _activating(cls.format)


def register(spark: SparkSession) -> None:
    """Make `format("webdataset")` known to this SparkSession (once per session, from any thread)."""
    try:
        application_id = spark.conf.get("spark.app.id")
    except Exception:  # noqa: BLE001 - Spark Connect may not expose it; metadata only
        application_id = None
    # The writer runs in a separate process with no SparkContext: carry the
    # application id (for the manifest's run section) on the registered class.
    source = type("WebDatasetDataSource", (WebDatasetDataSource,), {"application_id": application_id})
    spark.dataSource.register(source)
    if hasattr(spark, "_jsparkSession"):  # a classic session: its JVM threads need it active
        _active_in_every_thread()
