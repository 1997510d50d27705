"""Write throughput of format("webdataset") against Spark's parquet writer and the
foreachPartition+tarfile workaround; the writer's peak worker memory; the core writer alone.

    .venv/bin/python bench/write_throughput.py --repeats 2 --quiet-wait 10   # the README's figures
    .venv/bin/python bench/write_throughput.py --quick                      # smoke run

Cases "small" (200k x 1 KiB) and "large" (20k x 100 KiB): one cached DataFrame (`__key__`,
`bin` random bytes, `cls` int), written side by side, interleaved, by

  webdataset   df.write.format("webdataset").option("maxShardBytes", ...).save(dir)   (ours)
  parquet      df.write.option("compression", "none").parquet(dir)                   target 1.0x / 1.3x
  workaround   df.foreachPartition(fn): one tar per partition with `tarfile`         target 10x
  arrow-noop   a Python data source that only iterates the Arrow batches (the floor of any
               Arrow-based Python writer)

Rate = payload (`bin`) MB/s; written bytes are in the JSON. A run while others used over
--max-other-cpu of the CPUs is retried. Memory: a fresh session writes 1 MiB samples (made in the
JVM) into 1 GiB shards while the Python workers' RSS is sampled (target < 300 MiB), then a no-op
writer does. Core: `encode_column` + `ShardWriter.write_batch` on one batch, no Spark.
`--profile`: one write a case with every task's write() under cProfile in its worker instead.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from harness import (
    GIB,
    MIB,
    Benchmark,
    Case,
    Contender,
    NoopDataSource,
    Ratio,
    arrow_confs,
    cached,
    main,
    measure,
    parse_size,
    peak_rss_run,
    profiled,
    random_batch,
    random_frame,
    start_spark,
    top_functions,
    tree_bytes,
)  # fmt: skip
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage  # noqa: E402

WRITERS = ("webdataset", "parquet", "workaround", "arrow-noop")
TARGETS = {  # issue 30's
    ("small", "parquet"): 1.0,
    ("large", "parquet"): 1.3,
    ("small", "workaround"): 10.0,
    ("large", "workaround"): 10.0,
}
MEMORY_TARGET_MIB = 300


def flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--small-rows", type=int, default=200_000)
    add("--small-bytes", type=parse_size, default=1024)
    add("--large-rows", type=int, default=20_000)
    add("--large-bytes", type=parse_size, default=100 * 1024)
    add("--partitions", type=int, default=4, help="same for every writer")
    add("--cores", type=int, default=2, help="local[N]")
    add("--max-shard-bytes", type=parse_size, default=256 * MIB)
    add("--writers", default=",".join(WRITERS), help=f"comma list of {WRITERS}")
    add("--cases", default="small,large")
    add("--memory-total-bytes", type=parse_size, default=int(2.5 * GIB))
    add("--memory-sample-bytes", type=parse_size, default=MIB)
    add("--memory-shard-bytes", type=parse_size, default=GIB)
    add("--memory-partitions", type=int, default=2)
    add("--skip-memory", action="store_true")
    add("--skip-core", action="store_true")
    add("--profile", action="store_true", help="only profile: one write a case, each task under cProfile")
    add("--profile-top", type=int, default=25)
    add("--profile-clock", choices=("cpu", "wall"), default="cpu")
    add("--driver-memory", default="10g")


def quick(args: argparse.Namespace) -> None:
    args.small_rows, args.large_rows = min(args.small_rows, 5_000), min(args.large_rows, 500)
    args.repeats, args.warmup, args.quiet_wait = 1, 0, 0.0
    args.memory_total_bytes, args.memory_shard_bytes = min(args.memory_total_bytes, 64 * MIB), 32 * MIB


def _tar_partition(directory: str, rows: Iterator[Any]) -> None:
    """The usual workaround: one tar per partition, a TarInfo + addfile per member."""
    import tarfile

    from pyspark import TaskContext

    context = TaskContext.get()
    with tarfile.open(os.path.join(directory, f"part-{context.partitionId() if context else 0:05d}.tar"), "w") as tar:
        for row in rows:
            for name, data in (("bin", row["bin"]), ("cls", str(row["cls"]).encode())):
                info = tarfile.TarInfo(f"{row['__key__']}.{name}")
                info.size, info.mode = len(data), 0o444
                tar.addfile(info, io.BytesIO(data))


def writers(df: Any, directory: str, max_shard_bytes: int) -> dict[str, Callable[[], None]]:
    def workaround() -> None:
        os.makedirs(directory, exist_ok=True)
        df.foreachPartition(functools.partial(_tar_partition, directory))

    def noop() -> None:
        os.makedirs(directory, exist_ok=True)
        df.write.format("bench_arrow_noop").mode("append").save(os.path.join(directory, "report.json"))

    return {
        "webdataset": lambda: (
            df.write.format("webdataset")
            .option("maxShardBytes", str(max_shard_bytes))
            .mode("overwrite")
            .save(directory)
        ),
        "parquet": lambda: df.write.option("compression", "none").mode("overwrite").parquet(directory),
        "workaround": workaround,
        "arrow-noop": noop,
    }


def write_case(spark: Any, args: argparse.Namespace, workdir: str, name: str, rows: int, size: int) -> dict[str, Any]:
    df, sizes = cached(random_frame(spark, rows, size, args.partitions))
    directory = os.path.join(workdir, name)
    runs = writers(df, directory, args.max_shard_bytes)

    def prepare() -> None:
        shutil.rmtree(directory, ignore_errors=True)
        os.sync()  # earlier runs' dirty pages are not this run's cost

    def check(writer: str) -> Callable[[Any], dict[str, Any]]:
        def after(_: Any) -> dict[str, Any]:
            if writer == "arrow-noop":
                info: dict[str, Any] = {"arrow_batches": json.loads(Path(directory, "report.json").read_text())}
            else:
                info = dict(zip(("written_bytes", "files"), tree_bytes(directory)))
            if writer == "webdataset":
                shards = json.loads(Path(directory, "_manifest.json").read_text())["shards"]
                assert sum(s["samples"] for s in shards) == rows, "webdataset wrote the wrong number of samples"
            shutil.rmtree(directory, ignore_errors=True)
            return info

        return after

    chosen = [w for w in args.writers.split(",") if w]
    contenders = {w: Contender(runs[w], rows * size, prepare, check(w)) for w in chosen}
    ratios = [
        Ratio("webdataset", b, TARGETS.get((name, b))) for b in WRITERS[1:] if b in chosen and "webdataset" in chosen
    ]
    info = {"rows": rows, "sample_bytes": size, "partitions": args.partitions, "cached": sizes}
    result = measure(Case(name, contenders, ratios, worker_rss=True, info=info), args)
    df.unpersist(blocking=True)
    return result


def memory(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    """Peak Python worker RSS writing 1 MiB samples into 1 GiB shards (fresh session: no worker
    ran before), then what a no-op Arrow writer peaks at and which batches it is handed."""
    rows = max(1, args.memory_total_bytes // args.memory_sample_bytes)
    spark = start_spark(args.cores, workdir, args.driver_memory, sources=[NoopDataSource])
    try:
        frame = spark.range(rows, numPartitions=args.memory_partitions).selectExpr(
            "format_string('%08d', id) AS __key__",
            f"CAST(randstr({args.memory_sample_bytes}, 7) AS BINARY) AS bin",
            "CAST(id % 10 AS INT) AS cls",
        )  # made in the JVM (randstr: ~6 bits a byte), so no Python worker runs before the write
        df, sizes = cached(frame)
        directory = os.path.join(workdir, "memory")
        runs = writers(df, directory, args.memory_shard_bytes)
        ours = peak_rss_run(runs["webdataset"])
        shards = json.loads(Path(directory, "_manifest.json").read_text())["shards"]
        shutil.rmtree(directory, ignore_errors=True)
        noop = peak_rss_run(runs["arrow-noop"])
        noop["batches"] = json.loads(Path(directory, "report.json").read_text())
        confs = arrow_confs(spark)
    finally:
        spark.stop()
    peak = ours["peak_worker_rss_mib"]
    return {
        "rows": rows, "sample_bytes": args.memory_sample_bytes, "max_shard_bytes": args.memory_shard_bytes,
        "cached": sizes, "webdataset": ours, "shards": len(shards), "noop": noop, "confs": confs,
        "target_mib": MEMORY_TARGET_MIB, "met": peak < MEMORY_TARGET_MIB,
        "note": f"memory: {rows} x {args.memory_sample_bytes / MIB:.2f} MiB into {args.memory_shard_bytes / MIB:.0f} MiB "
        f"shards ({len(shards)}): peak Python worker RSS {peak:.0f} MiB (target < {MEMORY_TARGET_MIB}: "
        f"{'met' if peak < MEMORY_TARGET_MIB else 'NOT met'}); no-op Arrow writer {noop['peak_worker_rss_mib']:.0f} MiB, "
        f"handed {noop['batches']}; confs {confs}",
    }  # fmt: skip


class _NullSink(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # type: ignore[override]
        return len(data)


def core_case(args: argparse.Namespace, workdir: str, rows: int, size: int) -> dict[str, Any]:
    """The format core alone, no Spark: encode the columns; write the batch to a null sink; to a file."""
    from spark_webdataset.format.encode import encode_column
    from spark_webdataset.format.shard_writer import ShardWriter

    batch = random_batch(np.arange(rows), size, np.random.default_rng(0))
    path = os.path.join(workdir, "core.tar")

    def encode() -> list[pa.Array]:
        return [encode_column(batch.column(name), name) for name in ("bin", "cls")]

    def write(open_shard: Callable[[int], Any]) -> None:
        writer = ShardWriter(["bin", "cls"], open_shard, max_shard_bytes=4 * GIB)
        writer.write_batch(batch.column("__key__"), encode())
        writer.close()

    contenders = {
        "encode_columns": Contender(encode, rows),
        "write_batch_null_sink": Contender(lambda: write(lambda _: _NullSink()), rows),
        "write_batch_to_file": Contender(lambda: write(lambda _: open(path, "wb", buffering=1 << 20)), rows),
    }
    result = measure(Case(f"core {size} B", contenders, unit="samples", scale=1, info={"rows": rows, "sample_bytes": size}),
                     args, repeats=max(3, args.repeats), warmup=0)  # fmt: skip
    result["profile"] = profiled(lambda: write(lambda _: _NullSink()), 8)
    return result


class ProfiledWriter(DataSourceArrowWriter):
    """The webdataset writer's `write` under cProfile in the Python worker, one .prof a task (the
    Arrow hand-off is inside `write`, so it is profiled too); CPU clock by default: on a shared
    machine wall time counts the waits for a core."""

    def __init__(self, inner: DataSourceArrowWriter, directory: str, cpu: bool) -> None:
        self.inner, self.directory, self.cpu = inner, directory, cpu

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        import cProfile

        from pyspark import TaskContext

        context = TaskContext.get()
        profile = cProfile.Profile(time.process_time) if self.cpu else cProfile.Profile()
        try:
            return profile.runcall(self.inner.write, iterator)
        finally:
            os.makedirs(self.directory, exist_ok=True)
            profile.dump_stats(
                os.path.join(self.directory, f"p{context.partitionId()}-t{context.taskAttemptId()}.prof")
            )

    def commit(self, messages: list[Any]) -> None:
        self.inner.commit(messages)

    def abort(self, messages: list[Any]) -> None:
        self.inner.abort(messages)


class ProfiledWebDataset(DataSource):
    """format("webdataset_profiled"): options profileDir and profileClock, the rest the writer's."""

    @classmethod
    def name(cls) -> str:
        return "webdataset_profiled"

    def writer(self, schema: Any, overwrite: bool) -> ProfiledWriter:
        from spark_webdataset.spark.options import WriteOptions
        from spark_webdataset.spark.writer import WebDatasetWriter

        options = {k: v for k, v in self.options.items() if k.lower() not in ("profiledir", "profileclock")}
        inner = WebDatasetWriter(WriteOptions.parse(options), schema, overwrite)
        return ProfiledWriter(inner, self.options["profileDir"], self.options.get("profileClock", "cpu") == "cpu")


def profile_case(spark: Any, args: argparse.Namespace, workdir: str, name: str, rows: int, size: int) -> dict[str, Any]:
    import pstats

    df, _ = cached(random_frame(spark, rows, size, args.partitions))
    directory, profiles = os.path.join(workdir, f"profile-{name}"), os.path.join(workdir, f"prof-{name}")
    for _ in range(2):  # the first warms the workers up; its profiles are dropped
        shutil.rmtree(profiles, ignore_errors=True)
        shutil.rmtree(directory, ignore_errors=True)
        (df.write.format("webdataset_profiled").option("maxShardBytes", str(args.max_shard_bytes))
         .option("profileDir", profiles).option("profileClock", args.profile_clock).mode("overwrite").save(directory))  # fmt: skip
    df.unpersist(blocking=True)
    files = sorted(str(p) for p in Path(profiles).glob("*.prof"))
    stats = pstats.Stats(*files)
    top = top_functions(stats, args.profile_top)
    per_sample = phases(stats, rows)
    lines = [f"profile {name}, top by own {args.profile_clock} time:"]
    lines += [
        f"  {e['tottime_s']:8.3f} s own {e['cumtime_s']:8.3f} s cum {e['calls']:>8}  {e['function']}" for e in top
    ]
    lines += [f"profile {name}, us a sample by phase ({args.profile_clock} clock, summed over the tasks): "
              + ", ".join(f"{phase} {value:.2f}" for phase, value in per_sample.items())]  # fmt: skip
    return {
        "case": name,
        "rows": rows,
        "sample_bytes": size,
        "top": top,
        "phases_us": per_sample,
        "note": "\n".join(lines),
    }


# The task's phases by the functions that do them (cumulative time; a function under another
# phase's function is counted there only): what bench/README.md's per-sample table shows.
PHASES = {
    "arrow hand-off": [("serializers.py", "load_stream"), ("serializers.py", "_load_stream_without_length")],
    "encode": [("encode.py", "encode_column")],
    "checks": [("shard_writer.py", "_check_keys"), ("shard_writer.py", "_check_samples")],
    "headers": [("shard_writer.py", "_names"), ("shard_writer.py", "_headers")],
    "join": [("shard_writer.py", "_joined_emitter"), ("shard_writer.py", "_direct_emitter"), ("shard_writer.py", "_pax_batch")],
    "crc32c": [("checksums.py", "crc32c_extend"), ("checksums.py", "crc32c_prefixes"), ("checksums.py", "slice_crcs")],
    "writes": [("shard_writer.py", "_emit")],
    "index rows": [("sample_index.py", "task_rows"), ("keys.py", "sort_run"), ("sample_index.py", "concat_rows"),
                   ("writer.py", "_stage_index_run")],
}  # fmt: skip


def phases(stats: Any, rows: int) -> dict[str, float]:
    """µs a sample in each of PHASES and in the whole `write()` (the rest is "other")."""
    table = stats.stats  # (file, line, function) -> (calls, primitive calls, own, cumulative, callers)

    def cumulative(file: str, function: str) -> float:
        return sum(v[3] for (f, _, name), v in table.items() if name == function and Path(f).name == file)

    result = {phase: sum(cumulative(*where) for where in wheres) for phase, wheres in PHASES.items()}
    # crc32c and writes run inside the emitters: the join is what the emitters spend besides them
    inside = sum(v[3] for (f, _, name), v in table.items() if Path(f).name == "shard_writer.py" and name == "emit")
    result["join"] = max(0.0, result["join"] + inside - result["crc32c"] - result["writes"])
    total = cumulative("writer.py", "write")
    result["other"] = max(0.0, total - sum(result.values()))
    result["write() total"] = total
    return {phase: round(seconds / rows * 1e6, 3) for phase, seconds in result.items()}


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    sizes = {"small": (args.small_rows, args.small_bytes), "large": (args.large_rows, args.large_bytes)}
    cases = [c for c in args.cases.split(",") if c]
    confs = {"spark.sql.shuffle.partitions": str(args.partitions)}
    spark = start_spark(args.cores, workdir, args.driver_memory, confs, [NoopDataSource, ProfiledWebDataset])
    try:
        if args.profile:
            args.output = str(Path(args.output).with_name("write_profile.json"))
            profiles = [profile_case(spark, args, workdir, c, *sizes[c]) for c in cases]
            return {"profiles": profiles, "notes": [p["note"] for p in profiles]}
        results: dict[str, Any] = {
            "confs": arrow_confs(spark),
            "cases": [write_case(spark, args, workdir, c, *sizes[c]) for c in cases],
        }
    finally:
        spark.stop()
    notes = []
    if not args.skip_memory:
        results["memory"] = memory(args, workdir)
        notes.append(results["memory"]["note"])
    if not args.skip_core:
        for rows, size in ((10_000, args.small_bytes), (1_000, args.large_bytes)):
            results["cases"].append(core_case(args, workdir, rows, size))
        notes += [f"core {c['sample_bytes']} B: " + ", ".join(f"{n} {1e6 / s['rate']:.2f} us/sample" for n, s in c["contenders"].items())
                  for c in results["cases"] if c["case"].startswith("core")]  # fmt: skip
    return {**results, "notes": notes}


BENCH = Benchmark(
    "write_throughput", __doc__, run, flags, quick,
    defaults={"repeats": 3, "quiet_wait": 30.0, "max_other_cpu": 0.10, "max_attempts": 4},
)  # fmt: skip

if __name__ == "__main__":
    main(BENCH)
