"""spark-webdataset: write and read WebDataset tar shards from Spark.

    import spark_webdataset
    spark_webdataset.register(spark)
    df.write.format("webdataset").option("maxShardBytes", "3GiB").save(uri)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__version__ = "0.1.0"


def register(spark: "SparkSession") -> None:
    """Make `format("webdataset")` known to this SparkSession (once per session)."""
    from .spark.datasource import WebDatasetDataSource

    try:
        application_id = spark.conf.get("spark.app.id")
    except Exception:  # noqa: BLE001 - Spark Connect may not expose it; metadata only
        application_id = None
    # The writer runs in a separate process with no SparkContext: carry the
    # application id (for the manifest's run section) on the registered class.
    source = type(
        "WebDatasetDataSource", (WebDatasetDataSource,), {"application_id": application_id}
    )
    spark.dataSource.register(source)


__all__ = ["register", "__version__"]
