"""The Spark Connect client side of test_spark_connect.py, in a process of its own.

    SPARK_REMOTE=sc://127.0.0.1:PORT python tests/support/connect_client.py OUTPUT_DIR

pyspark picks classic or Connect functions per process (`is_remote()`),
so a Connect client cannot share the test session's classic SparkSession.
Prints one JSON line: what it wrote and read back.
"""

from __future__ import annotations

import json
import sys


def main(output: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_webdataset

    spark = SparkSession.builder.getOrCreate()  # SPARK_REMOTE: a Connect session
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    spark_webdataset.register(spark)
    rows = spark.range(100).select(
        F.format_string("%05d", "id").alias("__key__"),
        F.concat(F.lit("sample "), F.col("id").cast("string")).alias("txt"),
        F.sha2(F.col("id").cast("string"), 256).cast("binary").alias("bin"),
    )
    rows.write.format("webdataset").option("maxSamplesPerShard", "30").mode("overwrite").save(output)
    back = spark.read.format("webdataset").load(output)
    one = spark.read.format("webdataset").option("keyMin", "00042").option("keyMax", "00042").load(output).collect()
    print(
        json.dumps(
            {
                "session": type(spark).__module__,
                "keys": sorted(row["__key__"] for row in back.select("__key__").collect()),
                "one": [{"key": r["__key__"], "url": r["__url__"], "txt": bytes(r["txt"]).decode()} for r in one],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
