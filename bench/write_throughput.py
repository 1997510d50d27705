"""Write throughput of `format("webdataset")` against parquet and the foreachPartition+tarfile workaround.

Run it with `make bench`, which runs `.venv/bin/python bench/write_throughput.py` (the issue's
sizes: 200k x 1 KiB and 20k x 100 KiB samples, 3 clean runs each, ~10 minutes on 2 idle cores),
or a quick smoke run:

    .venv/bin/python bench/write_throughput.py --quick

Per case one DataFrame (`__key__` string, `bin` binary of random bytes, `cls` int) is cached
and counted, then written side by side, interleaved, once untimed (warm-up) and `--repeats`
times each by:

  webdataset   df.write.format("webdataset").option("maxShardBytes", ...).mode("overwrite").save(dir)
  parquet      df.write.option("compression", "none").mode("overwrite").parquet(dir)
  workaround   df.foreachPartition(fn), fn writes one tar per partition with `tarfile`
               (a TarInfo + addfile per member, from the pickled Rows Spark gives it)
  arrow-noop   a Python data source whose Arrow writer only iterates the batches (the floor
               any Arrow-based Python writer pays to get the rows out of Spark)

The best (shortest) time of the clean repeats is reported (a run during which other processes
used over 10% of the CPUs is retried; this machine is shared); all times are in the JSON. MB = 10^6
bytes. "payload MB/s" counts the `bin` column's bytes; "written MB/s" counts every byte the
writer left in its output directory. A second part measures the peak RSS of the Python
workers while the webdataset writer writes 1 GiB shards of 1 MiB samples (fresh
SparkSession, data generated in the JVM so no Python worker ran before the write), and a
third times `ShardWriter.write_batch` alone, outside Spark. Results go to
bench/results/write_throughput.json.
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
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from common import (  # sets sys.path and the environment Spark's workers need
    GIB,
    MB,
    MIB,
    REPO,
    NoopDataSource,
    ProfiledWebDataset,
    RssSampler,
    arrow_confs,
    busy_seconds,
    local_spark,
    merged_profile,
    parse_size,
    random_batch,
    random_rows,
    tree_bytes,
    wait_for_quiet,
    write_results,
)

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

WRITERS = ("webdataset", "parquet", "workaround", "arrow-noop")
# ours / baseline, payload throughput: (case, baseline) -> minimum
TARGETS = {
    ("small", "parquet"): 0.7,
    ("large", "parquet"): 1.0,
    ("small", "workaround"): 3.0,
    ("large", "workaround"): 3.0,
}
MEMORY_TARGET_MIB = 300


# -- data ---------------------------------------------------------------------


def random_frame(spark: SparkSession, rows: int, sample_bytes: int, partitions: int) -> DataFrame:
    """Random, incompressible payloads made by numpy in a mapInArrow (fast; uses Python workers)."""
    return spark.range(rows, numPartitions=partitions).mapInArrow(
        functools.partial(random_rows, sample_bytes), "__key__ string, bin binary, cls int"
    )


def jvm_frame(spark: SparkSession, rows: int, sample_bytes: int, partitions: int) -> DataFrame:
    """Payloads made in the JVM (`randstr`, 62 symbols: ~6 bits a byte), so no Python worker runs."""
    return spark.range(rows, numPartitions=partitions).selectExpr(
        "format_string('%08d', id) AS __key__",
        f"CAST(randstr({sample_bytes}, 7) AS BINARY) AS bin",
        "CAST(id % 10 AS INT) AS cls",
    )


def cache(df: DataFrame) -> tuple[DataFrame, int, dict[str, int]]:
    """Cache and materialize; (df, payload bytes, what the block manager holds)."""
    df = df.cache()
    df.count()
    payload = int(df.selectExpr("sum(length(bin))").collect()[0][0])
    return df, payload, cached_sizes(df)


def cached_sizes(df: DataFrame) -> dict[str, int]:
    spark = df.sparkSession
    infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()  # type: ignore[union-attr]
    memory = sum(info.memSize() for info in infos)
    disk = sum(info.diskSize() for info in infos)
    return {"memory_bytes": int(memory), "disk_bytes": int(disk)}


# -- writers --------------------------------------------------------------------


def _tar_partition(directory: str, rows: Iterator[Any]) -> None:
    """The usual workaround: one tar per partition, a TarInfo + addfile per member."""
    import tarfile

    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context else 0
    with tarfile.open(os.path.join(directory, f"part-{partition:05d}.tar"), "w") as tar:
        for row in rows:
            key = row["__key__"]
            for name, data in (("bin", row["bin"]), ("cls", str(row["cls"]).encode())):
                info = tarfile.TarInfo(f"{key}.{name}")
                info.size = len(data)
                info.mode = 0o444
                tar.addfile(info, io.BytesIO(data))


def write_with(name: str, df: DataFrame, directory: str, max_shard_bytes: int) -> Callable[[], None]:
    if name == "webdataset":
        return lambda: (
            df.write.format("webdataset")
            .option("maxShardBytes", str(max_shard_bytes))
            .mode("overwrite")
            .save(directory)
        )
    if name == "parquet":
        return lambda: df.write.option("compression", "none").mode("overwrite").parquet(directory)
    if name == "workaround":

        def run() -> None:
            os.makedirs(directory, exist_ok=True)
            df.foreachPartition(functools.partial(_tar_partition, directory))

        return run
    if name == "arrow-noop":

        def noop() -> None:
            os.makedirs(directory, exist_ok=True)
            df.write.format("bench_arrow_noop").mode("append").save(os.path.join(directory, "report.json"))

        return noop
    raise ValueError(name)


# -- Python worker RSS --------------------------------------------------------


def pyspark_role(process: psutil.Process) -> str | None:
    """'worker' for a forked pyspark.daemon child, 'daemon' for the daemon, the module of another
    pyspark process (a planner/commit worker); None for the rest."""
    command = " ".join(process.cmdline())
    parent = process.parent()
    parent_command = " ".join(parent.cmdline()) if parent else ""
    if "pyspark.daemon" in command:
        return "worker" if "pyspark.daemon" in parent_command else "daemon"
    if "pyspark" in command and "java" not in process.name():
        return command.split()[-1].rsplit("/", 1)[-1][:60]
    return None


class WorkerRss(RssSampler):
    """The RSS of every pyspark Python process below this driver (common.RssSampler), and the CPU
    time of this driver and all its descendants (JVM, Python workers), so that the CPU the rest
    of the machine used during a run ("other CPU") can be reported."""

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__(pyspark_role, interval)
        self.me = psutil.Process()
        self._cpu_start: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        self._busy_start = 0.0
        self._wall_start = 0.0
        self.other_cpu_share = 0.0

    def _cpu(self, start: bool = False) -> None:
        for process in [self.me, *self.me.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            used = times.user + times.system
            if start:
                self._cpu_start[process.pid] = used
            self._cpu_last[process.pid] = used

    def sample(self) -> None:
        self._cpu()
        super().sample()

    def __enter__(self) -> "WorkerRss":
        self._cpu_start.clear()
        self._cpu_last.clear()
        self._busy_start = busy_seconds()
        self._wall_start = time.perf_counter()
        self._cpu(start=True)
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        ours = sum(used - self._cpu_start.get(pid, 0.0) for pid, used in self._cpu_last.items())
        busy = busy_seconds() - self._busy_start
        capacity = (time.perf_counter() - self._wall_start) * (os.cpu_count() or 1)
        self.other_cpu_share = max(0.0, busy - ours) / capacity if capacity else 0.0

    def peak(self, role: str = "worker") -> int:
        return max((rss for pid, rss in self.peaks.items() if self.roles.get(pid) == role), default=0)


# -- the Spark parts -----------------------------------------------------------


def start_spark(args: argparse.Namespace) -> SparkSession:
    return local_spark(
        args.cores,
        "spark-webdataset-bench",
        args.workdir,
        args.driver_memory,
        confs={"spark.sql.shuffle.partitions": str(args.partitions)},
        sources=[NoopDataSource, ProfiledWebDataset],
    )


@dataclass
class WriterResult:
    times_s: list[float] = field(default_factory=list)  # clean runs (other CPU <= --max-other-cpu)
    all_times_s: list[float] = field(default_factory=list)  # every run, contended ones too
    warmup_s: list[float] = field(default_factory=list)  # untimed warm-up runs, not in the results
    written_bytes: int = 0
    files: int = 0
    # max RSS of any live Python worker during the run; reused idle workers count too
    max_live_worker_rss_mib: float = 0.0
    # share of the machine's CPU that other processes used during each run
    other_cpu_share: list[float] = field(default_factory=list)
    arrow_batches: dict[str, int] | None = None

    @property
    def contended(self) -> bool:
        """No run was clean: the numbers are from a machine other processes were using."""
        return not self.times_s

    @property
    def best_s(self) -> float:
        return min(self.times_s or self.all_times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s or self.all_times_s)


def run_once(
    args: argparse.Namespace,
    sampler: "WorkerRss",
    name: str,
    writer: str,
    df: DataFrame,
    rows: int,
    result: "WriterResult",
    wait: bool = True,
) -> float:
    """One timed write into a fresh directory; records time, other CPU and bytes in `result`."""
    directory = os.path.join(args.workdir, f"{name}-{writer}")
    shutil.rmtree(directory, ignore_errors=True)
    os.sync()  # earlier runs' dirty pages are not this run's cost
    if args.quiet_wait and wait:
        wait_for_quiet(args.quiet_wait, share=0.15)
    job = write_with(writer, df, directory, args.max_shard_bytes)
    with sampler:
        t0 = time.perf_counter()
        job()
        elapsed = time.perf_counter() - t0
    result.all_times_s.append(elapsed)
    result.other_cpu_share.append(sampler.other_cpu_share)
    if sampler.other_cpu_share <= args.max_other_cpu:
        result.times_s.append(elapsed)
    result.max_live_worker_rss_mib = max(result.max_live_worker_rss_mib, sampler.peak() / MIB)
    if writer == "arrow-noop":
        with open(os.path.join(directory, "report.json")) as stream:
            result.arrow_batches = json.load(stream)
    else:
        result.written_bytes, result.files = tree_bytes(directory)
    if writer == "webdataset":
        with open(os.path.join(directory, "_manifest.json")) as stream:
            samples = sum(shard["samples"] for shard in json.load(stream)["shards"])
        assert samples == rows, f"webdataset wrote {samples} samples, expected {rows}"
    shutil.rmtree(directory, ignore_errors=True)
    return elapsed


def run_case(
    spark: SparkSession, args: argparse.Namespace, name: str, rows: int, sample_bytes: int, writers: list[str]
) -> dict[str, Any]:
    print(f"\n== {name}: {rows} x {sample_bytes} B payload, {args.partitions} partitions", flush=True)
    started = time.perf_counter()
    df, payload, cached = cache(random_frame(spark, rows, sample_bytes, args.partitions))
    took = time.perf_counter() - started
    print(f"   cached {payload / MB:.0f} MB payload in {took:.1f} s: {cached}", flush=True)
    results = {writer: WriterResult() for writer in writers}
    sampler = WorkerRss()
    for _ in range(args.warmup):  # untimed: worker start-up, imports, JIT
        for writer in writers:
            warm = WriterResult()
            elapsed = run_once(args, sampler, name, writer, df, rows, warm, wait=False)
            results[writer].warmup_s.append(elapsed)
            print(f"   warm-up {writer:<11} {elapsed:7.2f} s", flush=True)
    for repeat in range(args.repeats):
        for writer in writers:
            result = results[writer]
            for attempt in range(1, args.max_attempts + 1):
                elapsed = run_once(args, sampler, name, writer, df, rows, result)
                clean = sampler.other_cpu_share <= args.max_other_cpu
                print(
                    f"   run {repeat + 1}/{args.repeats} {writer:<11} {elapsed:7.2f} s  "
                    f"{payload / MB / elapsed:7.1f} MB/s payload  "
                    f"{result.written_bytes / MB / elapsed:7.1f} MB/s written  "
                    f"other CPU {sampler.other_cpu_share:4.0%}{'' if clean else ' (contended, discarded)'}",
                    flush=True,
                )
                if clean:
                    break
    df.unpersist(blocking=True)
    out: dict[str, Any] = {
        "case": name,
        "rows": rows,
        "sample_bytes": sample_bytes,
        "partitions": args.partitions,
        "payload_bytes": payload,
        "cached": cached,
        "writers": {},
        "ratios": {},
    }
    for writer, result in results.items():
        out["writers"][writer] = {
            **asdict(result),
            "best_s": result.best_s,
            "median_s": result.median_s,
            "contended": result.contended,
            "payload_mb_s": payload / MB / result.best_s,
            "written_mb_s": result.written_bytes / MB / result.best_s,
        }
    if "webdataset" in results:
        for baseline in ("parquet", "workaround", "arrow-noop"):
            if baseline in results:
                ratio = results[baseline].best_s / results["webdataset"].best_s
                target = TARGETS.get((name, baseline))
                out["ratios"][f"webdataset/{baseline}"] = {
                    "ratio": ratio,
                    "target": target,
                    "met": None if target is None else ratio >= target,
                }
    return out


def run_memory(spark: SparkSession, args: argparse.Namespace) -> dict[str, Any]:
    rows = max(1, args.memory_total_bytes // args.memory_sample_bytes)
    partitions = args.memory_partitions
    print(
        f"\n== memory: {rows} x {args.memory_sample_bytes / MIB:.2f} MiB samples, {partitions} partitions, "
        f"maxShardBytes={args.memory_shard_bytes / MIB:.0f} MiB",
        flush=True,
    )
    started = time.perf_counter()
    df, payload, cached = cache(jvm_frame(spark, rows, args.memory_sample_bytes, partitions))
    took = time.perf_counter() - started
    print(f"   cached {payload / MB:.0f} MB payload in {took:.1f} s: {cached}", flush=True)
    directory = os.path.join(args.workdir, "memory-webdataset")
    shutil.rmtree(directory, ignore_errors=True)
    os.sync()
    if args.quiet_wait:
        wait_for_quiet(args.quiet_wait, share=0.15)
    sampler = WorkerRss()
    with sampler:
        t0 = time.perf_counter()
        write_with("webdataset", df, directory, args.memory_shard_bytes)()
        elapsed = time.perf_counter() - t0
    written, files = tree_bytes(directory)
    with open(os.path.join(directory, "_manifest.json")) as stream:
        shards = json.load(stream)["shards"]
    shutil.rmtree(directory, ignore_errors=True)
    processes = sampler.by_process()
    # What batches the Arrow writer is actually handed for these rows.
    noop_dir = os.path.join(args.workdir, "memory-noop")
    noop_sampler = WorkerRss()
    with noop_sampler:
        write_with("arrow-noop", df, noop_dir, 0)()
    with open(os.path.join(noop_dir, "report.json")) as stream:
        batches = json.load(stream)
    shutil.rmtree(noop_dir, ignore_errors=True)
    df.unpersist(blocking=True)
    peak = sampler.peak() / MIB
    result = {
        "rows": rows,
        "sample_bytes": args.memory_sample_bytes,
        "partitions": partitions,
        "max_shard_bytes": args.memory_shard_bytes,
        "payload_bytes": payload,
        "cached": cached,
        "seconds": elapsed,
        "payload_mb_s": payload / MB / elapsed,
        "written_bytes": written,
        "files": files,
        "shards": [{"name": s["name"], "samples": s["samples"], "bytes": s["bytes"]} for s in shards],
        "peak_worker_rss_mib": peak,
        "peak_daemon_rss_mib": sampler.peak("daemon") / MIB,
        "other_cpu_share": sampler.other_cpu_share,
        "processes": processes,
        "arrow_batches_seen_by_noop_writer": batches,
        "noop_peak_worker_rss_mib": noop_sampler.peak() / MIB,
        "target_mib": MEMORY_TARGET_MIB,
        "met": peak < MEMORY_TARGET_MIB,
        "confs": arrow_confs(spark),
    }
    print(f"   {elapsed:.1f} s, {len(shards)} shards, peak worker RSS {peak:.0f} MiB", flush=True)
    print(f"   per process: {processes}", flush=True)
    return result


# -- the webdataset writer profiled in its Python workers --------------------------------


def run_profile(spark: SparkSession, args: argparse.Namespace, name: str, rows: int, sample_bytes: int) -> dict[str, Any]:
    """One write of the case's cached DataFrame by format("webdataset_profiled") (common.py):
    every task's `write` under cProfile in its Python worker; the merged top functions by own time."""
    df, payload, _ = cache(random_frame(spark, rows, sample_bytes, args.partitions))
    directory = os.path.join(args.workdir, f"profile-{name}")
    profiles = os.path.join(args.workdir, f"profile-{name}-prof")
    for attempt in range(2):  # the first warms the workers up; its profiles are dropped
        shutil.rmtree(profiles, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)
        t0 = time.perf_counter()
        (
            df.write.format("webdataset_profiled")
            .option("maxShardBytes", str(args.max_shard_bytes))
            .option("profileDir", profiles)
            .option("profileClock", args.profile_clock)
            .mode("overwrite")
            .save(directory)
        )
        elapsed = time.perf_counter() - t0
    df.unpersist(blocking=True)
    shutil.rmtree(directory, ignore_errors=True)
    top = merged_profile(profiles, args.profile_top)
    print(f"\n== profile {name}: {rows} x {sample_bytes} B, {elapsed:.2f} s under cProfile; top by own {args.profile_clock} time:")
    for entry in top:
        print(f"   {entry['tottime_s']:8.3f} s own {entry['cumtime_s']:8.3f} s cum {entry['calls']:>8}  {entry['function']}")
    return {"case": name, "rows": rows, "sample_bytes": sample_bytes, "payload_bytes": payload, "seconds": elapsed, "top": top}


# -- the format core alone -------------------------------------------------------


class _NullSink(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # type: ignore[override]
        return len(data)


def core_benchmark(rows: int, sample_bytes: int, repeats: int, workdir: str) -> dict[str, Any]:
    """`encode_column` + `ShardWriter.write_batch` on one RecordBatch, no Spark."""
    from spark_webdataset.format.encode import encode_column
    from spark_webdataset.format.shard_writer import ShardWriter

    batch = random_batch(np.arange(rows), sample_bytes, np.random.default_rng(0))
    fields = ["bin", "cls"]

    def encode() -> list[pa.Array]:
        return [encode_column(batch.column(name), name) for name in fields]

    def write(open_shard: Callable[[int], Any]) -> None:
        writer = ShardWriter(fields, open_shard, max_shard_bytes=4 * GIB)
        writer.write_batch(batch.column("__key__"), encode())
        writer.close()

    path = os.path.join(workdir, "core.tar")

    def to_file() -> None:
        write(lambda _: open(path, "wb", buffering=1 << 20))

    timings: dict[str, float] = {}
    for label, fn in (
        ("encode_columns", encode),
        ("write_batch_null_sink", lambda: write(lambda _: _NullSink())),
        ("write_batch_to_file", to_file),
    ):
        best = min(_timed(fn) for _ in range(repeats))
        timings[label] = best
    profile = cProfile.Profile()
    profile.enable()
    write(lambda _: _NullSink())
    profile.disable()
    stats = pstats.Stats(profile)
    entries = stats.stats.items()  # type: ignore[attr-defined]
    top = sorted(entries, key=lambda item: item[1][2], reverse=True)[:8]
    tar_bytes = os.path.getsize(path)
    os.remove(path)
    return {
        "rows": rows,
        "sample_bytes": sample_bytes,
        "tar_bytes": tar_bytes,
        "best_s": timings,
        "us_per_sample": {label: seconds / rows * 1e6 for label, seconds in timings.items()},
        "mb_s_payload": {label: rows * sample_bytes / MB / seconds for label, seconds in timings.items()},
        "profile_tottime_s": [
            {
                "function": f"{Path(file).name}:{line}({func})",
                "tottime_s": round(values[2], 5),
                "calls": values[1],
            }
            for (file, line, func), values in top
        ],
    }


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- report ----------------------------------------------------------------------


def print_table(results: dict[str, Any]) -> None:
    print("\n" + "=" * 100)
    print(
        f"best of {results['config']['repeats']} clean runs (other processes used <= "
        f"{results['config']['max_other_cpu']:.0%} of the CPUs; contended runs are retried); "
        "MB = 10^6 bytes; "
        f"local[{results['config']['cores']}]; other CPU = that share during the best run"
    )
    header = f"{'case':<7} {'writer':<11} {'best s':>8} {'median s':>9} "
    header += f"{'payload MB/s':>13} {'written MB/s':>13} "
    header += f"{'written MB':>11} {'files':>6} {'other CPU':>10}"
    print(header)
    print("-" * len(header))
    for case in results["cases"]:
        for writer, r in case["writers"].items():
            print(
                f"{case['case']:<7} {writer:<11} {r['best_s']:8.2f} {r['median_s']:9.2f} "
                f"{r['payload_mb_s']:13.1f} "
                f"{r['written_mb_s']:13.1f} {r['written_bytes'] / MB:11.1f} {r['files']:6d} "
                f"{r['other_cpu_share'][r['all_times_s'].index(r['best_s'])]:10.0%}"
                f"{' (no clean run)' if r['contended'] else ''}"
            )
        for label, ratio in case["ratios"].items():
            target = ratio["target"]
            met = "met" if ratio["met"] else "NOT met"
            verdict = "" if target is None else f"  target >= {target:.1f}x: {met}"
            print(f"{'':<7} {label:<22} {ratio['ratio']:6.2f}x{verdict}")
        print("-" * len(header))
    memory = results.get("memory")
    if memory:
        print(
            f"memory: {memory['rows']} x {memory['sample_bytes'] / MIB:.2f} MiB, maxShardBytes "
            f"{memory['max_shard_bytes'] / MIB:.0f} MiB, {len(memory['shards'])} shards, "
            f"{memory['payload_mb_s']:.1f} MB/s: peak Python worker RSS "
            f"{memory['peak_worker_rss_mib']:.0f} MiB "
            f"(target < {MEMORY_TARGET_MIB} MiB: {'met' if memory['met'] else 'NOT met'}); daemon "
            f"{memory['peak_daemon_rss_mib']:.0f} MiB"
        )
        print(
            "        Arrow batches handed to a Python writer: "
            f"{memory['arrow_batches_seen_by_noop_writer']}; "
            f"a no-op Arrow writer's worker peaks at {memory['noop_peak_worker_rss_mib']:.0f} MiB"
        )
        print(f"        confs in effect: {memory['confs']}")
    for core in results.get("core", []):
        per = ", ".join(f"{k} {v:.2f} us" for k, v in core["us_per_sample"].items())
        print(f"core: {core['rows']} x {core['sample_bytes']} B, per sample: {per}")
    print("=" * 100)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small-rows", type=int, default=200_000)
    parser.add_argument("--small-bytes", type=parse_size, default=1024)
    parser.add_argument("--large-rows", type=int, default=20_000)
    parser.add_argument("--large-bytes", type=parse_size, default=100 * 1024)
    parser.add_argument("--partitions", type=int, default=4, help="same for every writer (default 4)")
    parser.add_argument("--cores", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per writer; the best is reported")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per writer before the timed ones")
    parser.add_argument("--max-shard-bytes", type=parse_size, default=256 * MIB)
    parser.add_argument("--writers", default=",".join(WRITERS), help=f"comma list of {WRITERS}")
    parser.add_argument("--cases", default="small,large")
    parser.add_argument("--memory-total-bytes", type=parse_size, default=int(2.5 * GIB))
    parser.add_argument("--memory-sample-bytes", type=parse_size, default=MIB)
    parser.add_argument("--memory-shard-bytes", type=parse_size, default=GIB)
    parser.add_argument("--memory-partitions", type=int, default=2)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=30.0,
        help="before each run, wait up to this many seconds for the CPUs to be idle (0: don't wait)",
    )
    parser.add_argument(
        "--max-other-cpu",
        type=float,
        default=0.10,
        help="a run during which other processes used more than this share of the CPUs is retried",
    )
    parser.add_argument("--max-attempts", type=int, default=4, help="tries per run to get a clean one")
    parser.add_argument("--skip-core", action="store_true")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="only profile: one write per case with every task's write() under cProfile in its worker",
    )
    parser.add_argument("--profile-top", type=int, default=25, help="functions listed per profile")
    parser.add_argument(
        "--profile-clock", choices=("cpu", "wall"), default="cpu", help="what the profile counts (default cpu)"
    )
    parser.add_argument("--driver-memory", default="10g")
    parser.add_argument("--tmp", default="/tmp", help="parent of the temporary work directory")
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "write_throughput.json"))
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 10x fewer rows, 2 repeats, 256 MiB memory case"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.small_rows = min(args.small_rows, 20_000)
        args.large_rows = min(args.large_rows, 2_000)
        args.repeats = min(args.repeats, 2)
        args.memory_total_bytes = min(args.memory_total_bytes, 256 * MIB)
        args.memory_shard_bytes = min(args.memory_shard_bytes, 96 * MIB)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    writers = [w for w in args.writers.split(",") if w]
    unknown = set(writers) - set(WRITERS)
    if unknown:
        raise SystemExit(f"unknown writers: {sorted(unknown)}")
    cases = {"small": (args.small_rows, args.small_bytes), "large": (args.large_rows, args.large_bytes)}
    import pyspark

    args.workdir = tempfile.mkdtemp(prefix="wds-bench-", dir=args.tmp)
    results: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items() if k != "workdir"},
        "environment": {
            "python": platform.python_version(),
            "pyspark": pyspark.__version__,
            "pyarrow": pa.__version__,
            "cpus": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
            "machine": platform.machine(),
        },
        "cases": [],
        "core": [],
    }
    try:
        spark = start_spark(args)
        results["confs"] = arrow_confs(spark)
        print(f"work dir {args.workdir}; confs {results['confs']}", flush=True)
        if args.profile:
            results["profiles"] = [
                run_profile(spark, args, case, *cases[case]) for case in [c for c in args.cases.split(",") if c]
            ]
            spark.stop()
            write_results(Path(args.output).with_name("write_profile.json"), results)
            return 0
        for case in [c for c in args.cases.split(",") if c]:
            rows, sample_bytes = cases[case]
            results["cases"].append(run_case(spark, args, case, rows, sample_bytes, writers))
        if not args.skip_memory:
            spark.stop()  # a fresh SparkContext: a new Python daemon, no worker that ran before
            spark = start_spark(args)
            results["memory"] = run_memory(spark, args)
        spark.stop()
        if not args.skip_core:
            for rows, sample_bytes in ((10_000, args.small_bytes), (1_000, args.large_bytes)):
                results["core"].append(core_benchmark(rows, sample_bytes, max(3, args.repeats), args.workdir))
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    print_table(results)
    write_results(args.output, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
