"""Streaming write throughput: writeStream.format("webdataset") with 10-second triggers against
the batch writer on the same files, in one process run.

    .venv/bin/python bench/stream_throughput.py            # 8 files x 1,000 x 100 KiB, 2 repeats
    .venv/bin/python bench/stream_throughput.py --quick

The source is --files uncompressed parquet files of --rows-per-file samples (made in the JVM).
Interleaved, --repeats times:

  batch    spark.read.parquet(src).write.format("webdataset").save(version)           (baseline)
  stream   spark.readStream.parquet(src) with maxFilesPerTrigger=2 (two files a micro-batch, as
           if they arrived per trigger) .writeStream.format("webdataset")
           .trigger(processingTime="10 seconds") until every file is committed          (ours)

The stream's figure is over its micro-batches' own time (the sum of their triggerExecution: what
the sink sustains when data arrives at least that fast; each batch pays its planning, commit and
index merge); its wall time (the triggers' waits included: the arrival rate, showing whether the
stream keeps up) is in the notes and the JSON.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

from harness import MB, Benchmark, Case, Contender, Ratio, main, measure, sha_frame, start_spark


def flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--files", type=int, default=8)
    add("--rows-per-file", type=int, default=1000)
    add("--sample-bytes", type=int, default=100 * 1024)
    add("--trigger-seconds", type=float, default=10.0)
    add("--files-per-trigger", type=int, default=2, help="maxFilesPerTrigger")
    add("--cores", type=int, default=2)


def quick(args: argparse.Namespace) -> None:
    args.files, args.rows_per_file, args.repeats, args.warmup, args.trigger_seconds = 4, 300, 1, 0, 2.0


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    work = Path(workdir)
    spark = start_spark(args.cores, str(work / "spark-local"))
    try:
        source, rows = str(work / "source"), args.files * args.rows_per_file
        sha_frame(spark, rows, args.sample_bytes, args.files).write.option("compression", "none").parquet(source)
        schema = spark.read.parquet(source).schema
        counter = iter(range(10**9))

        def batch() -> None:
            spark.read.parquet(source).write.format("webdataset").mode("overwrite").save(str(work / "batch"))

        def stream() -> dict[str, Any]:
            number = next(counter)
            started = time.monotonic()
            query = (
                spark.readStream.schema(schema).option("maxFilesPerTrigger", args.files_per_trigger).parquet(source)
                .writeStream.format("webdataset").option("checkpointLocation", str(work / f"ck-{number}"))
                .trigger(processingTime=f"{args.trigger_seconds:g} seconds").start(str(work / f"stream-{number}"))
            )  # fmt: skip
            try:
                query.processAllAvailable()
                wall = time.monotonic() - started
                batches = [p.durationMs["triggerExecution"] / 1000 for p in query.recentProgress if p.numInputRows]
            finally:
                query.stop()
            shards = len(list((work / f"stream-{number}").glob("shard-*.tar")))
            shutil.rmtree(work / f"stream-{number}", ignore_errors=True)
            return {"seconds": sum(batches), "wall_s": wall, "micro_batches": len(batches), "batch_durations_s": batches,
                    "shards": shards}  # fmt: skip

        def shards(_: Any) -> dict[str, int]:
            return {"shards": len(list((work / "batch").glob("shard-*.tar")))}

        payload = rows * args.sample_bytes
        fresh = lambda: shutil.rmtree(work / "batch", ignore_errors=True)  # noqa: E731 - a new version each run
        contenders = {"batch": Contender(batch, payload, fresh, shards), "stream": Contender(stream, payload)}
        info = {"rows": rows, "files": args.files, "sample_bytes": args.sample_bytes, "trigger_s": args.trigger_seconds}
        case = measure(Case("stream vs batch", contenders, [Ratio("stream", "batch")], info=info), args)
    finally:
        spark.stop()
    runs = [r for r in case["contenders"]["stream"]["runs"] if not r["warmup"]]
    notes = [f"stream, wall time ({args.trigger_seconds:g} s triggers, {r['micro_batches']} micro-batches): {r['wall_s']:.1f} s "
             f"= {payload / MB / r['wall_s']:.0f} MB/s; batches took {[round(d, 1) for d in r['batch_durations_s']]} s"
             for r in runs]  # fmt: skip
    return {"cases": [case], "notes": notes}


BENCH = Benchmark("stream_throughput", __doc__, run, flags, quick, defaults={"repeats": 2, "warmup": 0})

if __name__ == "__main__":
    main(BENCH)
