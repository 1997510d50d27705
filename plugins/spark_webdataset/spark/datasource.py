"""The `webdataset` Spark data source (Python Data Source API, Spark 4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

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


def register(spark: "SparkSession") -> None:
    """Make `format("webdataset")` known to this SparkSession (once per session)."""
    try:
        application_id = spark.conf.get("spark.app.id")
    except Exception:  # noqa: BLE001 - Spark Connect may not expose it; metadata only
        application_id = None
    # The writer runs in a separate process with no SparkContext: carry the
    # application id (for the manifest's run section) on the registered class.
    source = type("WebDatasetDataSource", (WebDatasetDataSource,), {"application_id": application_id})
    spark.dataSource.register(source)
