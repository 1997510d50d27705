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
    from .spark.datasource import register as register_data_source

    register_data_source(spark)


__all__ = ["register", "__version__"]
