"""Streaming write throughput: `writeStream.format("webdataset")` with 10-second triggers,
against the batch writer on the same data, in one process run.

    .venv/bin/python bench/stream_throughput.py            # 8 files x 1,000 x 100 KiB, 2 repeats
    .venv/bin/python bench/stream_throughput.py --quick    # 4 files x 300

The source is `--files` uncompressed parquet files of `--rows-per-file` samples (`__key__`, `bin`
of `--sample-bytes`), made in the JVM (no Python worker). Then, interleaved, `--repeats` times:

  batch    spark.read.parquet(src).write.format("webdataset").save(version)
  stream   spark.readStream.parquet(src) with maxFilesPerTrigger=2 (two files a micro-batch, as if
           they arrived per trigger: one task a core) .writeStream.format("webdataset")
           .trigger(processingTime="10 seconds") until every file is committed (processAllAvailable)

For the stream two rates: over the batches' own time (the sum of each micro-batch's
triggerExecution: what the sink sustains when data arrives at least that fast; each batch pays
its planning, the commit and the key merge against every earlier batch's keys) and over the wall
time (the trigger's waits included: with batches shorter than the trigger it is the arrival rate,
not a property of the sink; it shows the stream keeps up). MB = 10^6 bytes of payload (`bin`). The best repeat is
reported; all are in bench/results/stream_throughput.json.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import MB, RESULTS, local_spark, machine, print_table, sha_frame, write_results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rows-per-file", type=int, default=1000)
    parser.add_argument("--sample-bytes", type=int, default=100 * 1024)
    parser.add_argument("--trigger-seconds", type=float, default=10.0)
    parser.add_argument("--files-per-trigger", type=int, default=2, help="maxFilesPerTrigger")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 files x 300 rows, one repeat")
    parser.add_argument("--tmp", default=None)
    parser.add_argument("--output", default=str(RESULTS / "stream_throughput.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.files, args.rows_per_file, args.repeats = 4, 300, 1
    return args


def make_source(spark: Any, directory: Path, args: argparse.Namespace) -> None:
    rows = args.files * args.rows_per_file
    frame = sha_frame(spark, rows, args.sample_bytes, args.files)  # one file per partition
    frame.write.option("compression", "none").mode("overwrite").parquet(str(directory))


def run_batch(spark: Any, source: Path, target: Path) -> dict[str, Any]:
    started = time.monotonic()
    spark.read.parquet(str(source)).write.format("webdataset").mode("overwrite").save(str(target))
    return {"seconds": time.monotonic() - started, "shards": len(list(target.glob("shard-*.tar")))}


def run_stream(spark: Any, source: Path, target: Path, checkpoint: Path, args: argparse.Namespace) -> dict[str, Any]:
    schema = spark.read.parquet(str(source)).schema
    started = time.monotonic()
    query = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", args.files_per_trigger)
        .parquet(str(source))
        .writeStream.format("webdataset")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{args.trigger_seconds:g} seconds")
        .start(str(target))
    )
    try:
        query.processAllAvailable()
        wall = time.monotonic() - started
        batches = [p for p in query.recentProgress if p.numInputRows]
    finally:
        query.stop()
    return {
        "seconds": wall,
        "batch_seconds": sum(p.durationMs["triggerExecution"] for p in batches) / 1000,
        "micro_batches": len(batches),
        "batch_durations_s": [p.durationMs["triggerExecution"] / 1000 for p in batches],
        "shards": len(list(target.glob("shard-*.tar"))),
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="stream-bench-", dir=args.tmp))
    try:
        spark = local_spark(args.cores, "stream_throughput", str(work / "spark-local"))
        source = work / "source"
        make_source(spark, source, args)
        rows = args.files * args.rows_per_file
        payload = rows * args.sample_bytes
        runs: dict[str, list[dict[str, Any]]] = {"batch": [], "stream": []}
        for repeat in range(args.repeats):
            runs["batch"].append(run_batch(spark, source, work / f"batch-{repeat}"))
            runs["stream"].append(run_stream(spark, source, work / f"stream-{repeat}", work / f"ck-{repeat}", args))
            print(f"repeat {repeat}: batch {runs['batch'][-1]['seconds']:.1f} s, stream {runs['stream'][-1]}", flush=True)
        batch = min(runs["batch"], key=lambda r: r["seconds"])
        stream = min(runs["stream"], key=lambda r: r["batch_seconds"])
        table = [
            ("batch write", f"{batch['seconds']:.1f}", f"{rows / batch['seconds']:.0f}",
             f"{payload / MB / batch['seconds']:.0f}", "1.00", batch["shards"]),
            (f"stream, batches' time ({stream['micro_batches']} micro-batches)", f"{stream['batch_seconds']:.1f}",
             f"{rows / stream['batch_seconds']:.0f}", f"{payload / MB / stream['batch_seconds']:.0f}",
             f"{batch['seconds'] / stream['batch_seconds']:.2f}", stream["shards"]),
            (f"stream, wall time ({args.trigger_seconds:g} s triggers)", f"{stream['seconds']:.1f}",
             f"{rows / stream['seconds']:.0f}", f"{payload / MB / stream['seconds']:.0f}",
             f"{batch['seconds'] / stream['seconds']:.2f}", stream["shards"]),
        ]
        print(f"{rows} samples of {args.sample_bytes} bytes ({payload / MB:.0f} MB) in {args.files} files, local[{args.cores}]")
        print_table(("writer", "seconds", "rows/s", "MB/s", "x batch", "shards"), table)
        write_results(args.output, {
            "machine": machine(cores=args.cores),
            "args": vars(args),
            "rows": rows,
            "payload_bytes": payload,
            "runs": runs,
            "table": table,
        })
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
