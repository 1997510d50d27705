"""spark-webdataset: write and read WebDataset tar shards from Spark.

    import spark_webdataset
    spark_webdataset.register(spark)
    df.write.format("webdataset").option("maxShardBytes", "3GiB").save(uri)

    samples = spark_webdataset.open(uri)     # random access, no Spark needed
    samples.get("000123")["jpg"], samples[0], len(samples)

README.md starts there; docs/ has the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .dataset.random_access import VersionSamples

__version__ = "0.1.0"


def register(spark: SparkSession) -> None:
    """Make `format("webdataset")` known to this SparkSession: once per session, and every thread
    may then read and write it (see spark.datasource.register)."""
    from .spark.datasource import register as register_data_source

    register_data_source(spark)


def open(uri: str, cache_blocks: int = 256) -> VersionSamples:  # noqa: A001 - the package's verb, like tarfile.open
    """Random access to a version (a version directory, or a dataset root's LATEST), local or gs://:
    `len(r)`, `r[i]` (key order), `r.get(key)`, `r.keys()`; a sample is one ranged read of its bytes."""
    from .dataset.random_access import open_samples

    return open_samples(uri, cache_blocks)


__all__ = ["open", "register", "__version__"]
