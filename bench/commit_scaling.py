"""How the driver's commit grows with the number of shards, and how fast sorted key runs merge.

    .venv/bin/python bench/commit_scaling.py              # 100, 1000, 5000 shards; 1M and 10M keys
    .venv/bin/python bench/commit_scaling.py --quick      # 100, 1000 shards; 1M keys
    .venv/bin/python bench/commit_scaling.py --only local|gcs|s3|merge

Commit: a version directory is laid out as N task attempts leave it (one tiny staged shard and
one sorted sample-index run each, named as spark/writer.py names them, and a commit message
each; untimed), then dataset.commit.commit_job alone is timed (lock, index merge, journal,
renames `concurrent_requests` at a time, manifest, cleanup), with its merge and rename phases.
Locally (then the second shard count with other thread counts, to pick LocalStorage.concurrent_requests)
on fake-gcs-server with 16 threads and on the S3 server (moto, tests/support/s3_server.py) with 16. Merge: format.keys merge_blocks + first_duplicate_in_blocks
over 100 sorted in-memory runs of 1M and 10M keys. Targets (issue 11.6): linear growth; local
<= 1 ms a shard (>= 1000 shards/s); emulator <= 5 ms a shard (>= 200/s); merge >= 5M keys/s.
The S3 server is held to the emulator's target (a rename there is six requests, two on gs://).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from harness import Benchmark, Case, Contender, commit_phases_timed, emulator, main, measure

BUCKET = "bench-commit"
SHARD_BYTES, KEYS_PER_SHARD = 1024, 10


def flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--shards", type=int, nargs="+", default=[100, 1000, 5000])
    add("--keys", type=int, nargs="+", default=[1_000_000, 10_000_000])
    add("--key-runs", type=int, default=100, help="sorted runs the keys are split into")
    add("--local-threads", type=int, nargs="+", default=[1, 4, 8, 16], help="compared at the second shard count")
    add("--gcs-threads", type=int, default=16)
    add("--no-gcs", action="store_true", help="skip the emulator")
    add("--s3-threads", type=int, default=16)
    add("--no-s3", action="store_true", help="skip the S3 server")
    add("--only", choices=("local", "gcs", "s3", "merge"), help="run one part")


def quick(args: argparse.Namespace) -> None:
    args.shards, args.keys, args.local_threads, args.repeats = [100, 400], [1_000_000], [1, 8], 1


AWS_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                 "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_PROFILE")  # fmt: skip


@contextlib.contextmanager
def s3_server(bucket: str) -> Iterator[Any]:
    """moto_server (the tests' S3 API, its own venv) with `bucket`, every client of the process
    pointed at it by AWS_ENDPOINT_URL and dummy keys; the environment restored after."""
    from tests.support.s3_server import S3Server, reserve_environment

    saved = {k: os.environ.get(k) for k in AWS_VARIABLES}
    reserve_environment()
    server = S3Server(os.environ["AWS_ENDPOINT_URL"])
    try:
        server.create_bucket(bucket)
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def stage(uri: str, shards: int, threads: int) -> tuple[Any, list[Any]]:
    """A writer and the commit messages of `shards` task attempts, one tiny shard and index run each."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from spark_webdataset.dataset.tree import STAGED_INDEX_NAME, staged_shard_name
    from spark_webdataset.format.checksums import crc32c_extend, crc32c_text
    from spark_webdataset.format.sample_index import TASK_SCHEMA
    from spark_webdataset.format.shard_writer import ShardInfo
    from spark_webdataset.spark.options import WriteOptions
    from spark_webdataset.spark.writer import WebDatasetCommitMessage, WebDatasetWriter

    schema = StructType([StructField("__key__", StringType()), StructField("bin", BinaryType())])
    writer = WebDatasetWriter(WriteOptions.parse({"path": uri}), schema, overwrite=True)
    storage = writer.version.storage

    def one(partition: int) -> Any:
        staging = storage.join(writer.staging_root, f"p{partition:05d}-a0-t{partition}")
        keys = [f"{partition:06d}-{i:04d}" for i in range(KEYS_PER_SHARD)]
        data = partition.to_bytes(4, "big") * (SHARD_BYTES // 4)  # distinct bytes, so distinct crc32c
        storage.write_atomic(storage.join(staging, staged_shard_name(0)), data)
        rows = pa.record_batch([pa.array(keys, pa.large_string()), pa.array([0] * len(keys), pa.int32()),
                                pa.array(range(0, 1024 * len(keys), 1024), pa.int64()), pa.array([100] * len(keys), pa.int64()),
                                pa.array([0] * len(keys), pa.uint32())], schema=TASK_SCHEMA)  # fmt: skip
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, TASK_SCHEMA) as ipc:
            ipc.write_batch(rows)
        index_path = storage.join(staging, STAGED_INDEX_NAME)
        storage.write_atomic(index_path, sink.getvalue().to_pybytes())
        info = ShardInfo(0, KEYS_PER_SHARD, len(data), crc32c_text(crc32c_extend(0, data)), keys[0], keys[-1])
        return WebDatasetCommitMessage(partition, 0, partition, staging, [info], index_path, True)

    with ThreadPoolExecutor(threads) as pool:
        return writer, list(pool.map(one, range(shards)))


def commit_contender(
    uri: str, shards: int, threads: int, stage_threads: int, server: psutil.Process | None
) -> Contender:
    """Staging untimed (prepare), commit_job timed; its phases and the emulator's CPU reported."""
    from spark_webdataset.dataset import commit as commit_module
    from spark_webdataset.storage import storage_for

    staged: list[Any] = []
    storage_class = type(storage_for(uri))

    def prepare() -> None:
        staged[:] = stage(uri, shards, stage_threads)

    def run() -> dict[str, Any]:
        threads_before, storage_class.concurrent_requests = storage_class.concurrent_requests, threads
        server_cpu = sum(server.cpu_times()[:2]) if server else 0.0
        try:
            writer, messages = staged
            with commit_phases_timed() as phases:
                manifest = commit_module.commit_job(writer.commit_request(messages))
        finally:
            storage_class.concurrent_requests = threads_before
        assert len(manifest.shards) == shards and manifest.samples == shards * KEYS_PER_SHARD
        return {**phases, "server_cpu_s": round(sum(server.cpu_times()[:2]) - server_cpu, 3) if server else None}

    return Contender(run, shards, prepare)


def merge_contender(total: int, runs: int) -> Contender:
    """merge_blocks + the duplicate check over `runs` sorted runs (interleaved keys) of `total` keys."""
    from spark_webdataset.format.keys import first_duplicate_in_blocks, merge_blocks

    per_run = total // runs
    built = []
    for run in range(runs):
        keys = pc.utf8_lpad(pc.cast(pa.array(np.arange(run, per_run * runs, runs)), pa.string()), 12, "0").cast(
            pa.large_string()
        )
        built.append([keys.slice(start, 65536) for start in range(0, len(keys), 65536)])

    def merge() -> None:
        merged = 0
        for keys, found in first_duplicate_in_blocks(merge_blocks(iter(blocks) for blocks in built)):
            assert found is None
            merged += len(keys)
        assert merged == per_run * runs

    return Contender(merge, per_run * runs)


def growth(case: dict[str, Any]) -> str:
    """A straight line through (shards, seconds): fixed cost, marginal ms a shard, worst misfit."""
    points = [(s["work"], s["best_s"]) for s in case["contenders"].values()]
    if len(points) < 2:
        return ""
    x, y = np.array(points).T
    slope, intercept = np.polyfit(x, y, 1)
    worst = float(np.max(np.abs(y - (slope * x + intercept))) / max(float(np.max(y)), 1e-9))
    per_shard = ", ".join(f"{n} {1000 * s['best_s'] / s['work']:.3f} ms" for n, s in case["contenders"].items())
    return (f"{case['case']}: seconds = {intercept:.3f} fixed + {slope * 1000:.3f} ms x shards (points within "
            f"{worst:.0%} of the largest time from the line); a shard: {per_shard}")  # fmt: skip


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    from spark_webdataset.storage.local import LocalStorage

    cases: list[dict[str, Any]] = []
    unit = {"unit": "shards", "scale": 1}
    if args.only in (None, "local"):
        compared = args.shards[min(1, len(args.shards) - 1)]
        threads = {
            f"{t} thread{'s' if t > 1 else ''}": commit_contender(f"{workdir}/t{t}", compared, t, 4, None)
            for t in args.local_threads
        }
        cases.append(measure(Case(f"local {compared} shards", threads, **unit), args, repeats=1, warmup=0))
        counts = {
            f"{n} shards": commit_contender(f"{workdir}/v{n}", n, LocalStorage.concurrent_requests, 4, None)
            for n in args.shards
        }
        cases.append(measure(Case("local", counts, min_rate=1000, **unit), args, repeats=1, warmup=0))
    if not args.no_gcs and args.only in (None, "gcs"):
        with emulator(BUCKET) as server:
            process = psutil.Process(server.process.pid)
            counts = {
                f"{n} shards": commit_contender(f"gs://{BUCKET}/v{n}", n, args.gcs_threads, 16, process)
                for n in args.shards
            }
            cases.append(
                measure(
                    Case(f"gcs {args.gcs_threads} threads", counts, min_rate=200, **unit), args, repeats=1, warmup=0
                )
            )
    if not args.no_s3 and args.only in (None, "s3"):
        with s3_server(BUCKET) as server:
            process = psutil.Process(server.process.pid)
            counts = {
                f"{n} shards": commit_contender(f"s3://{BUCKET}/v{n}", n, args.s3_threads, 16, process)
                for n in args.shards
            }
            cases.append(
                measure(Case(f"s3 {args.s3_threads} threads", counts, min_rate=200, **unit), args, repeats=1, warmup=0)
            )
    if args.only in (None, "merge"):
        merges = {f"{n:,} keys": merge_contender(n, args.key_runs) for n in args.keys}
        cases.append(
            measure(Case(f"merge {args.key_runs} runs", merges, unit="keys", scale=1, min_rate=5e6), args, warmup=0)
        )
    return {
        "cases": cases,
        "notes": [
            g for c in cases if c["case"] in ("local",) or c["case"].startswith(("gcs", "s3")) if (g := growth(c))
        ],
    }


BENCH = Benchmark("commit_scaling", __doc__, run, flags, quick, defaults={"repeats": 3, "warmup": 0})

if __name__ == "__main__":
    main(BENCH)
