"""Read throughput of `format("webdataset")` against the webdataset library and Spark's parquet reader.

Run it (the issue's sizes: 200k x 1 KiB and 20k x 100 KiB samples; ~10-15 minutes on 2 idle
cores):

    .venv/bin/python bench/read_throughput.py

or a quick smoke run (20k x 1 KiB and 2k x 100 KiB):

    .venv/bin/python bench/read_throughput.py --quick

Per case one DataFrame (`__key__` '%08d', `bin` binary of random bytes, `cls` int) is written
once by our writer (`format("webdataset")`, maxShardBytes 256MiB) and once as uncompressed
parquet, under --workdir (kept and reused by later runs with the same sizes, see --fresh).
Then, on the same files, each variant is run once to warm the page cache and `--repeats`
more times, interleaved; the best (shortest) time is reported:

  ours        spark.read.format("webdataset").load(version_dir)
              .selectExpr("count(*)", "sum(length(__key__))", "sum(length(bin))", "sum(length(cls))")
  ours-keys   spark.read.format("webdataset").schema("__key__ string").load(version_dir).count()
              (payloads skipped by seeking)
  floor       a Python data source that yields one prebuilt Arrow batch of our reader's shape
              (16 MiB, same rows and partitions) over and over, same aggregate: what any Python
              data source pays to hand the rows to Spark, so the most our reader can reach
  parquet     spark.read.parquet(dir).selectExpr(the same aggregate, with sum(cls))
  webdataset  for s in wds.WebDataset(urls, shardshuffle=False): touch s['__key__'], s['bin'],
              s['cls'] (no decoding), in this Python process: one core
  cat         every shard read into a reused 8 MiB buffer (the page-cache floor)

The Spark variants run on master local[1] (per core), then local[2] (--cores). "payload MB/s"
counts the `bin` bytes (MB = 10^6 bytes); samples/s counts rows. Ratios: ours/webdataset
(target >= 1.0 per core) and ours/parquet (target >= 0.5). Each run records the 1-minute load
average, the share of the machine's CPU that other processes used while it ran, and the CPU
seconds of this process and its children (JVM, Python workers): on a busy machine "MB/cpu-s"
(payload MB per CPU second, from the run that used the least CPU) compares variants more
fairly than wall time, and the ratios are given both ways.

Part gcs (`--parts ...,gcs`): fake-gcs-server (spark_webdataset.testing.gcs_emulator, as
bench/gcs_upload_throughput.py starts it, STORAGE_EMULATOR_HOST set before any JVM starts) gets a
copy of each case's version directory (upload_from_filename); then, interleaved as above:

  gcs-ours      the `ours` aggregate on gs://bench-read/<case>/webdataset (local[1])
  gcs-reader    WebDatasetReader.read over every shard in this process (no Spark; one core)
  gcs-download  blob.download_as_bytes() of every shard in turn (google-cloud-storage, one core):
                a plain sequential download of the same objects, the bound on gs:// reads here

A last part calls the reader outside Spark, `WebDatasetReader(ReadOptions(path),
schema).read(ShardPartition(url, 0))` on the first shard of each case, timed and under
cProfile. `--plugins DIR` runs everything against another copy of the package (e.g. a scratch
copy with a proposed change) and `--out` names the JSON; the default is
bench/results/read_throughput.json (read_throughput.quick.json with --quick).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import os
import platform
import pstats
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[1]


def _plugins_dir(argv: list[str]) -> str:
    for i, arg in enumerate(argv):
        if arg == "--plugins" and i + 1 < len(argv):
            return os.path.abspath(argv[i + 1])
        if arg.startswith("--plugins="):
            return os.path.abspath(arg.split("=", 1)[1])
    return str(REPO / "plugins")


from common import MB, MIB, busy_seconds, local_spark, random_batch, random_rows, start_emulator, stop_emulator, tree_bytes  # noqa: E402

GCS_BUCKET = "bench-read"

PLUGINS = _plugins_dir(sys.argv)  # ahead of the repository's (common put that one on the path)
sys.path.insert(0, PLUGINS)
# Python workers inherit PYTHONPATH from the JVM, which inherits it from us.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (PLUGINS, os.environ.get("PYTHONPATH", "")) if p)

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

CASES = {"small": (200_000, 1024), "large": (20_000, 100 * 1024)}
QUICK_CASES = {"small": (20_000, 1024), "large": (2_000, 100 * 1024)}
MAX_SHARD_BYTES = "256MiB"
TARGETS = {"webdataset": 1.0, "parquet": 0.5}  # ours / baseline, per core
FULL_AGG = ("count(*) AS n", "sum(length(__key__)) AS key_bytes", "sum(length(bin)) AS payload")


# -- data ---------------------------------------------------------------------


def shard_urls(version_dir: str) -> list[str]:
    from spark_webdataset.spark.reader import resolve

    return resolve(version_dir)[0]


def build_data(args: argparse.Namespace, cases: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Write every case once as webdataset and parquet (or reuse what an earlier run wrote)."""
    described = os.path.join(args.workdir, "data.json")
    wanted = {name: {"rows": rows, "sample_bytes": size} for name, (rows, size) in cases.items()}
    if not args.fresh and os.path.exists(described):
        with open(described) as stream:
            found = json.load(stream)
        if all(found.get(name, {}).get(k) == v[k] for name, v in wanted.items() for k in v):
            print(f"reusing the data in {args.workdir} (--fresh rewrites it)", flush=True)
            return {name: found[name] for name in wanted}
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    spark = start_spark(args, cores=2)
    data: dict[str, Any] = {}
    try:
        for name, (rows, size) in cases.items():
            started = time.perf_counter()
            df = spark.range(rows, numPartitions=2).mapInArrow(
                functools.partial(random_rows, size), "__key__ string, bin binary, cls int"
            )
            df = df.cache()
            df.count()
            wds_dir = os.path.join(args.workdir, name, "webdataset")
            parquet_dir = os.path.join(args.workdir, name, "parquet")
            writer = df.write.format("webdataset").option("maxShardBytes", MAX_SHARD_BYTES)
            writer.mode("overwrite").save(wds_dir)
            df.write.option("compression", "none").parquet(parquet_dir)
            df.unpersist()
            tar_bytes, shards = tree_bytes(wds_dir, ".tar")
            parquet_bytes, parquet_files = tree_bytes(parquet_dir, ".parquet")
            data[name] = {
                "rows": rows,
                "sample_bytes": size,
                "payload_bytes": rows * size,
                "webdataset_dir": wds_dir,
                "parquet_dir": parquet_dir,
                "shards": shards,
                "tar_bytes": tar_bytes,
                "parquet_files": parquet_files,
                "parquet_bytes": parquet_bytes,
                "build_s": round(time.perf_counter() - started, 1),
            }
            print(f"built {name}: {shards} shards, {tar_bytes / MB:.0f} MB tar, "
                  f"{parquet_bytes / MB:.0f} MB parquet in {data[name]['build_s']} s", flush=True)
    finally:
        spark.stop()
    with open(described, "w") as stream:
        json.dump(data, stream, indent=1)
    return data


# -- load ---------------------------------------------------------------------


class Load:
    """Wall time, CPU of this process and its descendants (JVM, Python workers), CPU of everyone else."""

    def __init__(self) -> None:
        self.me = psutil.Process()

    def _ours(self) -> dict[int, float]:
        used: dict[int, float] = {}
        for process in [self.me, *self.me.children(recursive=True)]:
            try:
                times = process.cpu_times()
                used[process.pid] = times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
        return used

    def __enter__(self) -> "Load":
        self.load1 = os.getloadavg()[0]
        self._ours_start = self._ours()
        self._busy_start = busy_seconds()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start
        busy = busy_seconds() - self._busy_start
        end = self._ours()
        ours = sum(used - self._ours_start.get(pid, 0.0) for pid, used in end.items())
        cores = os.cpu_count() or 1
        self.our_cores = ours / self.seconds if self.seconds else 0.0
        self.other_share = max(0.0, busy - ours) / (self.seconds * cores) if self.seconds else 0.0

    def record(self) -> dict[str, float]:
        return {
            "seconds": round(self.seconds, 4),
            "load1": round(self.load1, 2),
            "our_cores": round(self.our_cores, 2),
            "our_cpu_s": round(self.our_cores * self.seconds, 3),
            "other_cpu_share": round(self.other_share, 3),
        }


# -- variants -----------------------------------------------------------------


@dataclass
class FloorPartition(InputPartition):
    rows: int


class FloorReader(DataSourceReader):
    """Yields one prebuilt batch of our reader's shape over and over: no file, no parsing.

    What any Python data source pays to hand these rows to Spark (Arrow to the JVM, rows out);
    our reader cannot be faster than this in Spark.
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options["rows"])
        self.sample_bytes = int(options["sample_bytes"])
        self.partitions_n = int(options["partitions"])
        self.batch_rows = int(options["batch_rows"])

    def partitions(self) -> list[FloorPartition]:
        share = -(-self.rows // self.partitions_n)
        return [FloorPartition(min(share, self.rows - i * share)) for i in range(self.partitions_n)]

    def read(self, partition: FloorPartition) -> Iterator[pa.RecordBatch]:
        rng = np.random.default_rng(0)
        base = random_batch(np.arange(self.batch_rows), self.sample_bytes, rng)
        cls = pa.array([b"%d" % (i % 10) for i in range(self.batch_rows)], pa.binary())
        url = pa.repeat(pa.scalar("/some/dir/shard-000000.tar"), self.batch_rows)
        batch = pa.RecordBatch.from_arrays(
            [base.column(0), url, base.column(1), cls], names=["__key__", "__url__", "bin", "cls"]
        )
        left = partition.rows
        while left > 0:
            yield batch if left >= len(batch) else batch.slice(0, left)
            left -= len(batch)


class FloorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_arrow_floor"

    def schema(self) -> str:
        return "__key__ string, __url__ string, bin binary, cls binary"

    def reader(self, schema: StructType) -> FloorReader:
        return FloorReader(self.options)



def start_spark(args: argparse.Namespace, cores: int) -> SparkSession:
    local_dir = os.path.join(args.workdir, "spark-local")
    return local_spark(cores, "spark-webdataset-read-bench", local_dir, args.driver_memory, sources=[FloorDataSource])


def variants(spark: SparkSession | None, case: dict[str, Any]) -> dict[str, Callable[[], tuple[int, int]]]:
    """name -> run(); each returns (samples, payload bytes) it saw."""
    wds_dir, parquet_dir = case["webdataset_dir"], case["parquet_dir"]
    urls = shard_urls(wds_dir)
    found: dict[str, Callable[[], tuple[int, int]]] = {}

    if spark is not None:

        def ours() -> tuple[int, int]:
            df = spark.read.format("webdataset").load(wds_dir)
            row = df.selectExpr(*FULL_AGG, "sum(length(cls)) AS cls").collect()[0]
            return int(row["n"]), int(row["payload"])

        def ours_keys() -> tuple[int, int]:
            return spark.read.format("webdataset").schema("__key__ string").load(wds_dir).count(), 0

        def floor() -> tuple[int, int]:
            df = (
                spark.read.format("bench_arrow_floor")
                .option("rows", case["rows"])
                .option("sample_bytes", case["sample_bytes"])
                .option("partitions", len(urls))
                .option("batch_rows", max(1, (16 * MIB) // case["sample_bytes"]))
                .load()
            )
            row = df.selectExpr(*FULL_AGG, "sum(length(cls)) AS cls").collect()[0]
            return int(row["n"]), int(row["payload"])

        def parquet() -> tuple[int, int]:
            row = spark.read.parquet(parquet_dir).selectExpr(*FULL_AGG, "sum(cls) AS cls").collect()[0]
            return int(row["n"]), int(row["payload"])

        found.update({"ours": ours, "ours-keys": ours_keys, "floor": floor, "parquet": parquet})
    else:

        def webdataset() -> tuple[int, int]:
            import webdataset as wds

            samples = payload = 0
            for sample in wds.WebDataset(urls, shardshuffle=False):
                payload += len(sample["bin"])
                len(sample["cls"])
                len(sample["__key__"])
                samples += 1
            return samples, payload

        def cat() -> tuple[int, int]:
            buffer = bytearray(8 * MIB)
            total = 0
            for url in urls:
                with open(url, "rb", buffering=0) as stream:
                    while count := stream.readinto(buffer):
                        total += count
            return 0, total

        found.update({"webdataset": webdataset, "cat": cat})
    return found


def measure(
    name: str, runs: dict[str, Callable[[], tuple[int, int]]], case: dict[str, Any], repeats: int, label: str
) -> dict[str, Any]:
    """Warm every variant once, then `repeats` interleaved rounds; the best time per variant."""
    results: dict[str, Any] = {}
    for variant, run in runs.items():
        with Load() as load:
            samples, payload = run()
        raw = variant in ("cat", "gcs-download")  # bytes of the shards, no samples
        expected_payload = case["tar_bytes"] if raw else case["payload_bytes"]
        if variant != "ours-keys" and payload != expected_payload:
            raise AssertionError(f"{name}/{variant}: saw {payload} bytes, expected {expected_payload}")
        if not raw and samples != case["rows"]:
            raise AssertionError(f"{name}/{variant}: saw {samples} samples, expected {case['rows']}")
        results[variant] = {"warm": load.record(), "runs": []}
        print(f"  {label} {name:5s} {variant:10s} warm  {load.seconds:7.2f} s", flush=True)
    for round_ in range(repeats):
        for variant, run in runs.items():
            with Load() as load:
                run()
            results[variant]["runs"].append(load.record())
            print(f"  {label} {name:5s} {variant:10s} run {round_ + 1} {load.seconds:7.2f} s  "
                  f"load1 {load.load1:4.2f}  ours {load.our_cores:4.2f} cores  "
                  f"others {load.other_share:5.1%}", flush=True)
    for variant, record in results.items():
        best = min(record["runs"], key=lambda r: r["seconds"])
        record["best"] = best
        record["best_s"] = best["seconds"]
        record["samples_per_s"] = case["rows"] / best["seconds"]
        record["payload_mb_s"] = case["payload_bytes"] / best["seconds"] / MB
        cpu = min(r["our_cpu_s"] for r in record["runs"])
        record["best_cpu_s"] = cpu
        record["payload_mb_per_cpu_s"] = case["payload_bytes"] / cpu / MB if cpu else None
        read = {"parquet": case["parquet_bytes"], "floor": case["payload_bytes"]}
        read = read.get(variant, case["tar_bytes"])
        record["bytes_mb_s"] = read / best["seconds"] / MB
    return results


# -- the reader outside Spark ---------------------------------------------------


def direct_read(case: dict[str, Any], repeats: int) -> dict[str, Any]:
    """WebDatasetReader.read on the first shard: timed (best of `repeats`), then under cProfile."""
    from spark_webdataset.spark.options import ReadOptions
    from spark_webdataset.spark.reader import ShardPartition, WebDatasetReader, default_schema

    version_dir = case["webdataset_dir"]
    schema = default_schema(ReadOptions(version_dir))
    url = shard_urls(version_dir)[0]
    reader = WebDatasetReader(ReadOptions(version_dir), schema)

    def consume(which: WebDatasetReader) -> tuple[int, int, int]:
        rows = payload = batches = 0
        for batch in which.read(ShardPartition(url, 0)):
            rows += batch.num_rows
            payload += pc.sum(pc.binary_length(batch.column("bin"))).as_py() or 0
            batches += 1
        return rows, payload, batches

    consume(reader)  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        rows, payload, batches = consume(reader)
        times.append(time.perf_counter() - started)
    keys_reader = WebDatasetReader(ReadOptions(version_dir), StructType([schema["__key__"]]))
    consume_keys = lambda: sum(b.num_rows for b in keys_reader.read(ShardPartition(url, 0)))  # noqa: E731
    consume_keys()
    key_times = []
    for _ in range(repeats):
        started = time.perf_counter()
        consume_keys()
        key_times.append(time.perf_counter() - started)
    profiler = cProfile.Profile()
    profiler.enable()
    consume(reader)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    best = min(times)
    return {
        "shard": url,
        "shard_bytes": os.path.getsize(url),
        "rows": rows,
        "batches": batches,
        "payload_bytes": payload,
        "best_s": round(best, 4),
        "us_per_sample": best / rows * 1e6,
        "payload_mb_s": payload / best / MB,
        "keys_only_best_s": round(min(key_times), 4),
        "keys_only_us_per_sample": min(key_times) / rows * 1e6,
        "profile_top": out.getvalue(),
    }


# -- gs:// against the emulator -------------------------------------------------


def upload_case(name: str, case: dict[str, Any]) -> str:
    """Copy the case's version directory (shards, manifest, marks) to gs://; returns its URI."""
    from spark_webdataset.storage.gcs import client

    bucket = client().bucket(GCS_BUCKET)
    local = case["webdataset_dir"]
    prefix = f"{name}/webdataset"
    started = time.perf_counter()
    for root, _, files in os.walk(local):
        for file in files:
            path = os.path.join(root, file)
            bucket.blob(f"{prefix}/{os.path.relpath(path, local)}").upload_from_filename(path)
    print(f"  uploaded {name} to gs://{GCS_BUCKET}/{prefix} in {time.perf_counter() - started:.1f} s", flush=True)
    return f"gs://{GCS_BUCKET}/{prefix}"


def gcs_variants(spark: SparkSession, uri: str) -> dict[str, Callable[[], tuple[int, int]]]:
    """The gs:// runs of one case; each returns (samples, payload bytes) or (0, object bytes)."""
    from spark_webdataset.spark.options import ReadOptions
    from spark_webdataset.spark.reader import ShardPartition, WebDatasetReader, default_schema
    from spark_webdataset.storage.gcs import client, split

    urls = shard_urls(uri)

    def ours() -> tuple[int, int]:
        row = spark.read.format("webdataset").load(uri).selectExpr(*FULL_AGG, "sum(length(cls)) AS cls").collect()[0]
        return int(row["n"]), int(row["payload"])

    def reader() -> tuple[int, int]:
        options = ReadOptions(uri)
        read = WebDatasetReader(options, default_schema(options))
        samples = payload = 0
        for index, url in enumerate(urls):
            for batch in read.read(ShardPartition(url, index)):
                samples += batch.num_rows
                payload += pc.sum(pc.binary_length(batch.column("bin"))).as_py() or 0
        return samples, payload

    def download() -> tuple[int, int]:
        total = 0
        for url in urls:
            bucket, path = split(url)
            total += len(client().bucket(bucket).blob(path).download_as_bytes())
        return 0, total

    return {"gcs-ours": ours, "gcs-reader": reader, "gcs-download": download}


# -- report ---------------------------------------------------------------------


def print_table(results: dict[str, Any]) -> None:
    print()
    print(
        f"{'case':6s} {'cores':>5s} {'variant':11s} {'best s':>8s} {'payload MB/s':>13s} {'samples/s':>10s} "
        f"{'bytes MB/s':>11s} {'load1':>6s} {'others':>7s} {'ours cores':>10s} {'cpu s':>7s} {'MB/cpu-s':>9s}"
    )
    for label, cases in results["spark"].items():
        for name, runs in cases.items():
            for variant, record in runs.items():
                best = record["best"]
                print(
                    f"{name:6s} {label:>5s} {variant:11s} {record['best_s']:8.2f} "
                    f"{record['payload_mb_s']:13.1f} {record['samples_per_s']:10.0f} "
                    f"{record['bytes_mb_s']:11.1f} {best['load1']:6.2f} {best['other_cpu_share']:7.1%} "
                    f"{best['our_cores']:10.2f} {record['best_cpu_s']:7.2f} "
                    f"{record['payload_mb_per_cpu_s'] or 0:9.1f}"
                )
    print()
    for line in results["ratios"]:
        print(line["text"])
    if results.get("direct"):
        print()
        for name, record in results["direct"].items():
            print(f"direct WebDatasetReader.read, {name}: {record['rows']} samples of shard "
                  f"{os.path.basename(record['shard'])} in {record['best_s']:.3f} s = "
                  f"{record['us_per_sample']:.2f} µs/sample, {record['payload_mb_s']:.0f} payload MB/s; "
                  f"keys only {record['keys_only_best_s']:.3f} s "
                  f"({record['keys_only_us_per_sample']:.2f} µs/sample)")


def ratios(results: dict[str, Any]) -> list[dict[str, Any]]:
    lines = []
    library = results["spark"].get("py1", {})
    for label, cases in results["spark"].items():
        if label.startswith("py") or label == "gcs":
            continue
        for name, runs in cases.items():
            ours = runs["ours"]
            pairs = [("parquet", runs["parquet"])]
            if label == "1" and name in library:
                pairs.insert(0, ("webdataset", library[name]["webdataset"]))
            for baseline, other in pairs:
                ratio = ours["payload_mb_s"] / other["payload_mb_s"]
                cpu_ratio = other["best_cpu_s"] / ours["best_cpu_s"] if ours["best_cpu_s"] else 0.0
                target = TARGETS[baseline]
                lines.append({
                    "case": name, "cores": label, "baseline": baseline, "ratio": round(ratio, 3),
                    "cpu_ratio": round(cpu_ratio, 3), "target": target, "met": ratio >= target,
                    "text": f"{name:6s} local[{label}] ours/{baseline:10s} = {ratio:5.2f} by wall time, "
                            f"{cpu_ratio:5.2f} by CPU seconds  (target >= {target}: "
                            f"{'met' if ratio >= target else 'NOT met'} by wall time)",
                })
            keys, full = runs["ours-keys"]["best_s"], runs["ours"]["best_s"]
            lines.append({
                "case": name, "cores": label, "baseline": "ours-keys", "ratio": round(full / keys, 3),
                "text": f"{name:6s} local[{label}] key-only read {keys:.2f} s vs full {full:.2f} s "
                        f"(full/key-only = {full / keys:.2f}; "
                        f"{runs['ours-keys']['samples_per_s']:.0f} samples/s)",
            })
    for name, runs in results["spark"].get("gcs", {}).items():
        download = runs["gcs-download"]
        for variant in ("gcs-ours", "gcs-reader"):
            ratio = runs[variant]["bytes_mb_s"] / download["bytes_mb_s"]
            lines.append({
                "case": name, "cores": "gcs", "baseline": "gcs-download", "variant": variant,
                "ratio": round(ratio, 3),
                "text": f"{name:6s} gs://     {variant}/gcs-download = {ratio:5.2f} in shard bytes per second "
                        f"({runs[variant]['bytes_mb_s']:.0f} vs {download['bytes_mb_s']:.0f} MB/s)",
            })
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20k x 1 KiB and 2k x 100 KiB, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs after the warm-up (3; quick 1)")
    parser.add_argument("--cores", default="1,2", help="Spark masters: local[N] for each N (default 1,2)")
    parser.add_argument("--cases", default="small,large")
    parser.add_argument("--parts", default="spark,library,direct", help="any of spark, library, direct, gcs")
    parser.add_argument("--workdir", default=None, help="data dir (/tmp/spark-wds-read-bench[-quick])")
    parser.add_argument("--fresh", action="store_true", help="rewrite the data even if --workdir holds it")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--plugins", default=str(REPO / "plugins"), help="the package copy to benchmark")
    parser.add_argument("--out", default=None, help="bench/results/read_throughput[.quick].json")
    args = parser.parse_args()
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.workdir = args.workdir or f"/tmp/spark-wds-read-bench{'-quick' if args.quick else ''}"
    name = f"read_throughput{'.quick' if args.quick else ''}.json"
    args.out = args.out or str(REPO / "bench" / "results" / name)
    table = QUICK_CASES if args.quick else CASES
    cases = {name: table[name] for name in args.cases.split(",")}
    parts = set(args.parts.split(","))

    import spark_webdataset

    print(f"package: {os.path.dirname(spark_webdataset.__file__)}; load {os.getloadavg()}", flush=True)
    emulator = start_emulator(GCS_BUCKET) if "gcs" in parts else None
    try:
        run_parts(args, cases, parts, emulator)
    finally:
        if emulator is not None:
            stop_emulator(emulator)


def run_parts(args: argparse.Namespace, cases: dict[str, tuple[int, int]], parts: set[str], emulator: Any) -> None:
    import spark_webdataset

    data = build_data(args, cases)
    results: dict[str, Any] = {
        "command": " ".join([os.path.relpath(sys.executable, REPO), *sys.argv]),
        "package": os.path.dirname(spark_webdataset.__file__),
        "machine": {
            "cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()
        },
        "load_at_start": os.getloadavg(),
        "data": data,
        "spark": {},
        "direct": {},
    }
    started = time.perf_counter()
    if "library" in parts:
        results["spark"]["py1"] = {
            name: measure(name, variants(None, case), case, args.repeats, "python")
            for name, case in data.items()
        }
    if "spark" in parts:
        for cores in [int(c) for c in args.cores.split(",")]:
            spark = start_spark(args, cores)
            try:
                results["spark"][str(cores)] = {
                    name: measure(name, variants(spark, case), case, args.repeats, f"local[{cores}]")
                    for name, case in data.items()
                }
            finally:
                spark.stop()
    if emulator is not None:
        uris = {name: upload_case(name, case) for name, case in data.items()}
        spark = start_spark(args, 1)
        try:
            results["spark"]["gcs"] = {
                name: measure(name, gcs_variants(spark, uris[name]), case, args.repeats, "gcs")
                for name, case in data.items()
            }
        finally:
            spark.stop()
    if "direct" in parts:
        for name, case in data.items():
            results["direct"][name] = direct_read(case, args.repeats)
            print(results["direct"][name]["profile_top"], flush=True)
    results["ratios"] = ratios(results) if parts & {"spark", "gcs"} else []
    results["load_at_end"] = os.getloadavg()
    results["bench_s"] = round(time.perf_counter() - started, 1)
    print_table(results)
    print(f"\nload average at start {results['load_at_start']}, at end {results['load_at_end']}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as stream:
        json.dump(results, stream, indent=1, default=str)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
