"""How the driver's commit grows with the number of shards, and how fast key runs merge.

Part 1 drives the real commit (spark/commit.py `commit_job`, with a real WebDatasetWriter made
without Spark): a version directory is laid out as N task attempts leave it (one tiny staged
shard and one sorted key run each, staged the way spark/writer.py's write() names them, and a
commit message each), then commit_job is timed: lock, key merge, journal, renames (in parallel,
`storage.rename_threads` at a time), manifest, cleanup. Locally and on fake-gcs-server
(spark_webdataset.testing.gcs_emulator, 127.0.0.1). The second shard count is also run with other local thread
counts, to pick LocalStorage.rename_threads.

Part 2 times the key merge alone (format/keys.py merge_blocks + first_duplicate_in_blocks, as
_merge_keys runs them) over sorted in-memory runs totalling 1M and 10M keys.

    python bench/commit_scaling.py                     # 100, 1000, 5000 shards; 1M and 10M keys
    python bench/commit_scaling.py --quick             # 100, 1000 shards; 1M keys
    python bench/commit_scaling.py --shards 100 --keys 1000000 --no-gcs

Targets (issue 11.6), commit alone: linear growth; local <= 1 ms a shard; emulator <= 5 ms a
shard with 16 threads; key merge >= 5M keys/s. Results: bench/results/commit_scaling.json.
"""

from __future__ import annotations

import argparse
import io
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from common import RESULTS, load, machine, print_table, write_results

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from spark_webdataset.format.checksums import crc32c_extend, crc32c_text  # noqa: E402
from spark_webdataset.format.keys import first_duplicate_in_blocks, merge_blocks  # noqa: E402
from spark_webdataset.format.shard_writer import ShardInfo  # noqa: E402
from spark_webdataset.dataset import commit as commit_module  # noqa: E402
from spark_webdataset.spark.options import WriteOptions  # noqa: E402
from spark_webdataset.dataset.layout import STAGED_KEYS_NAME  # noqa: E402
from spark_webdataset.spark.writer import WebDatasetCommitMessage, WebDatasetWriter  # noqa: E402

BUCKET = "bench-commit"
SHARD_BYTES = 1024
KEYS_PER_SHARD = 10
KEY_SCHEMA = pa.schema([("key", pa.large_string())])
TARGETS = {"local_ms_per_shard": 1.0, "gcs_ms_per_shard": 5.0, "merge_keys_per_s": 5e6}


def key_run_bytes(keys: list[str]) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, KEY_SCHEMA) as ipc:
        ipc.write_table(pa.table([pa.array(keys, pa.large_string())], names=["key"]), max_chunksize=65536)
    return sink.getvalue()


def stage(uri: str, shards: int, threads: int) -> tuple[WebDatasetWriter, list[WebDatasetCommitMessage]]:
    """A writer and the commit messages of `shards` task attempts, one tiny shard and key run each."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    schema = StructType([StructField("__key__", StringType()), StructField("bin", BinaryType())])
    writer = WebDatasetWriter(WriteOptions.parse({"path": uri}), schema, overwrite=True)
    storage = writer.version.storage

    def one(partition: int) -> WebDatasetCommitMessage:
        staging = storage.join(writer.staging_root, f"p{partition:05d}-a0-t{partition}")
        keys = [f"{partition:06d}-{i:04d}" for i in range(KEYS_PER_SHARD)]
        data = partition.to_bytes(4, "big") * (SHARD_BYTES // 4)  # distinct bytes, so distinct crc32c
        storage.write_atomic(storage.join(staging, "000000.tar"), data)
        keys_path = storage.join(staging, STAGED_KEYS_NAME)
        storage.write_atomic(keys_path, key_run_bytes(keys))
        info = ShardInfo(0, KEYS_PER_SHARD, len(data), crc32c_text(crc32c_extend(0, data)), keys[0], keys[-1])
        return WebDatasetCommitMessage(partition, 0, partition, staging, [info], keys_path, True)

    with ThreadPoolExecutor(threads) as pool:
        messages = list(pool.map(one, range(shards)))
    return writer, messages


class PhaseTimer:
    """Wraps commit.py's _merge_keys and _rename_all to time them inside a real commit_job."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> "PhaseTimer":
        for name, phase in (("_merge_keys", "merge_keys_s"), ("_rename_all", "renames_s")):
            original = getattr(commit_module, name)
            self._saved[name] = original

            def timed(*args: Any, _original: Any = original, _phase: str = phase, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.seconds[_phase] = self.seconds.get(_phase, 0.0) + time.perf_counter() - started

            setattr(commit_module, name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(commit_module, name, original)


def cpu_seconds(process: Any) -> float:
    times = process.cpu_times()
    return times.user + times.system + getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)


def run_commit(
    uri: str, shards: int, rename_threads: int, stage_threads: int, server: Any = None
) -> dict[str, Any]:
    """Stage `shards` task attempts at `uri`, then time commit_job (wall, this process's CPU, and
    the CPU of `server`, a psutil.Process: the emulator)."""
    import psutil

    me = psutil.Process()
    from spark_webdataset.storage import storage_for

    storage_class = type(storage_for(uri))
    saved = storage_class.rename_threads
    storage_class.rename_threads = rename_threads
    try:
        started = time.perf_counter()
        writer, messages = stage(uri, shards, stage_threads)
        staged_s = time.perf_counter() - started
        with PhaseTimer() as phases:
            cpu_before = cpu_seconds(me), cpu_seconds(server) if server else 0.0
            started = time.perf_counter()
            manifest = commit_module.commit_job(writer.commit_request(messages))
            seconds = time.perf_counter() - started
            client_cpu = cpu_seconds(me) - cpu_before[0]
            server_cpu = cpu_seconds(server) - cpu_before[1] if server else None
    finally:
        storage_class.rename_threads = saved
    assert len(manifest.shards) == shards and manifest.samples == shards * KEYS_PER_SHARD
    return {
        "shards": shards,
        "rename_threads": rename_threads,
        "commit_s": round(seconds, 3),
        "ms_per_shard": round(seconds * 1000 / shards, 3),
        **{k: round(v, 3) for k, v in phases.seconds.items()},
        "client_cpu_s": round(client_cpu, 3),
        "server_cpu_s": None if server_cpu is None else round(server_cpu, 3),
        "load": load(),
        "stage_s": round(staged_s, 2),
    }


def merge_keys(total: int, runs: int, repeats: int) -> dict[str, Any]:
    """merge_blocks + the duplicate check over `runs` sorted runs (interleaved keys) of `total` keys;
    the best of `repeats` (the machine is shared: the best run is the one least disturbed)."""
    per_run = total // runs
    built = []
    for run in range(runs):
        numbers = pa.array(range(run, per_run * runs, runs), pa.int64())
        keys = pc.utf8_lpad(pc.cast(numbers, pa.string()), 12, "0").cast(pa.large_string())
        built.append([keys.slice(start, 65536) for start in range(0, len(keys), 65536)])
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        merged = 0
        for keys, found in first_duplicate_in_blocks(merge_blocks(iter(blocks) for blocks in built)):
            assert found is None
            merged += len(keys)
        times.append(time.perf_counter() - started)
        assert merged == per_run * runs
    seconds = min(times)
    return {
        "keys": merged,
        "runs": runs,
        "seconds": round(seconds, 3),
        "all_seconds": [round(t, 3) for t in times],
        "keys_per_s": round(merged / seconds),
    }


def growth(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A straight line through (shards, seconds): the fixed cost (lock, journal, manifest: a few
    fsyncs or requests), the marginal cost of one more shard, and how far the points stray from
    it; plus the per-shard cost at the most shards over that at the fewest."""
    if len(rows) < 2:
        return None
    import numpy as np

    x = np.array([r["shards"] for r in rows], dtype=float)
    y = np.array([r["commit_s"] for r in rows], dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    worst = float(np.max(np.abs(y - (slope * x + intercept))) / max(float(np.max(y)), 1e-9))
    return {
        "fixed_s": round(float(intercept), 3),
        "marginal_ms_per_shard": round(float(slope) * 1000, 3),
        "worst_misfit": round(worst, 3),
        "per_shard_ratio_most_to_fewest": round(rows[-1]["ms_per_shard"] / rows[0]["ms_per_shard"], 2),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--key-runs", type=int, default=100, help="sorted runs the keys are split into")
    parser.add_argument("--repeats", type=int, default=3, help="key merges of each size (the best is reported)")
    parser.add_argument("--local-threads", type=int, nargs="+", default=[1, 4, 8, 16],
                        help="local rename threads compared at the second shard count")  # fmt: skip
    parser.add_argument("--gcs-threads", type=int, default=16)
    parser.add_argument("--no-gcs", action="store_true", help="skip the emulator")
    parser.add_argument("--only", choices=("local", "gcs", "merge"), help="run one part (results: that part only)")
    parser.add_argument("--quick", action="store_true", help="100 and 1000 shards, 1M keys")
    parser.add_argument("--tmp", default=None, help="where the local versions go (default: the system's temp)")
    parser.add_argument("--output", default=str(RESULTS / "commit_scaling.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.shards, args.keys = [100, 1000], [1_000_000]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from spark_webdataset.storage.local import LocalStorage

    results: dict[str, Any] = {"config": dict(vars(args)), "machine": machine(), "load_start": load()}
    workdir = tempfile.mkdtemp(prefix="bench-commit-", dir=args.tmp)
    try:
        if args.only not in (None, "local"):
            raise _Skip
        local_default = LocalStorage.rename_threads
        compared = args.shards[min(1, len(args.shards) - 1)]
        results["local_threads"] = [
            run_commit(f"{workdir}/threads-{t}", compared, t, 4) for t in args.local_threads
        ]
        results["local"] = [run_commit(f"{workdir}/v{n}", n, local_default, 4) for n in args.shards]
        for row in results["local_threads"] + results["local"]:
            print(f"local {row}", flush=True)
    except _Skip:
        pass
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if not args.no_gcs and args.only in (None, "gcs"):
        results["gcs"] = run_gcs(args)
    if args.only in (None, "merge"):
        results["merge"] = [merge_keys(total, args.key_runs, args.repeats) for total in args.keys]
    for row in results.get("merge", []):
        print(f"merge {row}", flush=True)
    results["growth"] = {"local": growth(results.get("local", [])), "gcs": growth(results.get("gcs", []))}
    results["load_end"] = load()
    write_results(args.output, results)
    report(results)


class _Skip(Exception):
    pass


def run_gcs(args: argparse.Namespace) -> list[dict[str, Any]]:
    import os

    import psutil
    from spark_webdataset.testing.gcs_emulator import Emulator

    emulator = Emulator()
    server = psutil.Process(emulator.process.pid)
    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
    try:
        emulator.create_bucket(BUCKET)
        rows = []
        for n in args.shards:
            rows.append(run_commit(f"gs://{BUCKET}/v{n}", n, args.gcs_threads, 16, server))
            print(f"gcs {rows[-1]}", flush=True)
        return rows
    finally:
        if saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved
        emulator.stop()
        shutil.rmtree(emulator.root, ignore_errors=True)


def report(results: dict[str, Any]) -> None:
    print("\ncommit of N staged shards (commit_job alone; staging not counted)")
    rows = []
    for where in ("local_threads", "local", "gcs"):
        for r in results.get(where, []):
            server = "-" if r["server_cpu_s"] is None else f"{r['server_cpu_s']:.2f}"
            rows.append([where, r["shards"], r["rename_threads"], f"{r['commit_s']:.3f}", f"{r['ms_per_shard']:.3f}",
                         f"{r.get('merge_keys_s', 0):.3f}", f"{r.get('renames_s', 0):.3f}", f"{r['client_cpu_s']:.2f}",
                         server])  # fmt: skip
    print_table(
        ["storage", "shards", "threads", "commit s", "ms/shard", "key merge s", "renames s", "our CPU s", "emulator CPU s"],
        rows,
    )
    for where, fit in results["growth"].items():
        if fit:
            print(
                f"{where}: seconds = {fit['fixed_s']:.3f} fixed + {fit['marginal_ms_per_shard']:.3f} ms x shards "
                f"(points within {fit['worst_misfit']:.0%} of the largest time from the line)"
            )
    if results.get("merge"):
        print("\nkey merge (merge_blocks + duplicate check, in memory, best of --repeats)")
        print_table(
            ["keys", "runs", "seconds", "keys/s", "ns/key"],
            [[m["keys"], m["runs"], m["seconds"], f"{m['keys_per_s']:,}", f"{1e9 / m['keys_per_s']:.0f}"]
             for m in results["merge"]],
        )  # fmt: skip
    print()
    for where, name, target in (("local", "local", "local_ms_per_shard"), ("gcs", "emulator", "gcs_ms_per_shard")):
        if results.get(where):
            worst = max(r["ms_per_shard"] for r in results[where])
            goal = TARGETS[target]
            print(f"target {name} ms/shard <= {goal}: worst {worst:.3f} -> {'met' if worst <= goal else 'NOT met'}")
    if results.get("merge"):
        slowest = min(m["keys_per_s"] for m in results["merge"])
        met = slowest >= TARGETS["merge_keys_per_s"]
        print(f"target key merge >= 5M keys/s: slowest {slowest:,} -> {'met' if met else 'NOT met'}")
    print(f"load average: start {results['load_start']}, end {results['load_end']}")


if __name__ == "__main__":
    main()
