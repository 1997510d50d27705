"""A streaming query in a driver process of its own, for the tests that SIGKILL it.

    python tests/support/streaming_driver.py SOURCE_DIR VERSION_DIR CHECKPOINT '{"option": "value"}'

Reads the JSON files of SOURCE_DIR one file a micro-batch (1-second
triggers) into the version directory until it is killed.
"""

from __future__ import annotations

import json
import sys

SCHEMA = "__key__ string, txt string, cls long"


def stream(spark, source: str, version: str, checkpoint: str, options: dict[str, str], available_now: bool):
    """The query the kill tests run (in this process) and finish (in the test session)."""
    writer = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(source)
        .writeStream.format("webdataset")
        .option("checkpointLocation", checkpoint)
        .options(**options)
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="1 second")
    return writer.start(version)


def main(argv: list[str]) -> None:
    from pyspark.sql import SparkSession

    import spark_webdataset

    source, version, checkpoint, options = argv
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark_webdataset.register(spark)
    stream(spark, source, version, checkpoint, json.loads(options), available_now=False).awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
