"""The `webdataset` Spark data source (Python Data Source API, Spark 4)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceWriter
from pyspark.sql.types import StructType

from .options import WriteOptions


class WebDatasetDataSource(DataSource):
    """`df.write.format("webdataset").save(uri)`: see DESIGN.md, "The writer"."""

    application_id: str | None = None

    @classmethod
    def name(cls) -> str:
        return "webdataset"

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import WebDatasetWriter

        return WebDatasetWriter(WriteOptions.parse(self.options), schema, overwrite, self.application_id)
