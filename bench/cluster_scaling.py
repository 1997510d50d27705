"""The same webdataset write on a Spark standalone cluster with 1 executor core vs 2, in one run.

    .venv/bin/python bench/cluster_scaling.py            # full size (~10 minutes on 2 cores)
    .venv/bin/python bench/cluster_scaling.py --quick    # smoke run

Starts a master and a worker (SPARK_WORKER_CORES=2) with scripts/spark_cluster.sh on free ports,
ships the package to executors as the zip from scripts/build_pyfiles.sh (sc.addPyFile; executors
run this interpreter), and for each round and each of --cores (default 1,2) starts a fresh
SparkSession against the master with spark.cores.max=N, caches the same deterministic DataFrame
in the executor (`__key__` '%08d', `bin` = sha2(id) hex repeated to --sample-bytes, made in the
JVM, spark.range(rows, numPartitions=8)), then times only

    df.write.format("webdataset").option("maxShardBytes", "256MiB").mode("overwrite").save(local dir)

--repeats times. Rounds interleave the core counts, so slow drift in what else the machine runs
hits both. Each session first does --warmup untimed writes (the first write of a session costs
about twice the CPU: JIT, Python worker start-up and imports), and each timed write first waits up
to --quiet-wait s for the machine to be quiet. Reported: best and median seconds, payload MB/s
(MB = 10^6 B) per core count, the speedup, the load average, the cores this benchmark's processes
(driver, master, worker, executors and their Python workers) actually used during each write
(their CPU seconds / wall seconds), the share of the machine's CPU everything else used, and
payload MB per CPU second (the cost, which contention does not change much); "clean" figures
use only the runs during which everything else used at most --max-other-cpu of the machine.
Results: bench/results/cluster_scaling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from common import GIB, MB, MIB, REPO, busy_seconds, load, parse_size, sha_frame, wait_for_quiet

os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

import psutil  # noqa: E402

SCRIPT = REPO / "scripts" / "spark_cluster.sh"


class CpuWatch:
    """CPU seconds of our process trees (driver, master, worker: executors below it) vs the machine's."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.seen: dict[int, float] = {}
        self.start: dict[int, float] = {}

    def _tree(self) -> list[psutil.Process]:
        found = []
        for pid in self.roots:
            try:
                root = psutil.Process(pid)
                found += [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
        return found

    def _read(self, first: bool) -> None:
        for process in self._tree():
            try:
                times = process.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            used = times.user + times.system
            if first:
                self.start[process.pid] = used
            elif process.pid not in self.start:
                self.start[process.pid] = 0.0
            self.seen[process.pid] = used

    def __enter__(self) -> "CpuWatch":
        self.seen.clear()
        self.start.clear()
        self._read(first=True)
        self.busy0 = busy_seconds()
        self.wall0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._read(first=False)
        self.wall = time.perf_counter() - self.wall0
        self.busy = busy_seconds() - self.busy0
        self.ours = sum(self.seen[pid] - self.start[pid] for pid in self.seen)
        capacity = self.wall * (os.cpu_count() or 1)
        self.other_share = max(0.0, self.busy - self.ours) / capacity if capacity else 0.0
        self.ours_share = self.ours / capacity if capacity else 0.0


def build_zip(workdir: str) -> str:
    done = subprocess.run(
        [str(REPO / "scripts" / "build_pyfiles.sh"), os.path.join(workdir, "spark_webdataset.zip")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def cluster_env(args: argparse.Namespace, state: str) -> dict[str, str]:
    from spark_webdataset.testing.gcs_emulator import free_port

    return {
        **os.environ,
        "SPARK_CLUSTER_DIR": state,
        "SPARK_MASTER_PORT": str(free_port()),
        "SPARK_MASTER_WEBUI_PORT": str(free_port()),
        "SPARK_WORKER_CORES": "2",
        "SPARK_WORKER_MEMORY": args.worker_memory,
    }


def master_json(env: dict[str, str]) -> dict[str, Any]:
    url = f"http://127.0.0.1:{env['SPARK_MASTER_WEBUI_PORT']}/json/"
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.loads(reply.read())


def start_session(args: argparse.Namespace, master: str, cores: int, zip_path: str, workdir: str):
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(f"bench-cluster-scaling-{cores}core")
        .config("spark.cores.max", str(cores))
        .config("spark.executor.memory", args.executor_memory)
        .config("spark.driver.memory", "2g")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", workdir)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.addPyFile(zip_path)
    import spark_webdataset

    spark_webdataset.register(spark)
    return spark


def executor_cores(spark: Any, env: dict[str, str]) -> dict[str, Any]:
    app_id = spark.sparkContext.applicationId
    for app in master_json(env).get("activeapps", []):
        if app.get("id") == app_id:
            return {"app_id": app_id, "cores": app.get("cores"), "memoryperslave": app.get("memoryperslave")}
    return {"app_id": app_id, "cores": None}


def run_config(
    args: argparse.Namespace,
    env: dict[str, str],
    master: str,
    cores: int,
    zip_path: str,
    workdir: str,
    roots: list[int],
) -> dict[str, Any]:
    rows = max(1, args.total_bytes // args.sample_bytes)
    payload = rows * args.sample_bytes
    spark = start_session(args, master, cores, zip_path, workdir)
    try:
        t0 = time.perf_counter()
        df = sha_frame(spark, rows, args.sample_bytes, args.partitions).cache()
        assert df.count() == rows
        cache_s = time.perf_counter() - t0
        infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()  # type: ignore[union-attr]
        cached = {
            "memory_bytes": int(sum(i.memSize() for i in infos)),
            "disk_bytes": int(sum(i.diskSize() for i in infos)),
        }
        granted = executor_cores(spark, env)
        print(
            f"   session {granted['app_id']}: spark.cores.max={cores}, granted {granted['cores']} cores; "
            f"cached {payload / MB:.0f} MB in {cache_s:.1f} s {cached}",
            flush=True,
        )
        out_dir = os.path.join(workdir, f"out-{cores}")

        def write() -> None:
            (
                df.write.format("webdataset")
                .option("maxShardBytes", str(args.max_shard_bytes))
                .mode("overwrite")
                .save(out_dir)
            )

        warmups = []
        for _ in range(args.warmup):  # JIT, Python worker start and imports: not the steady state
            t0 = time.perf_counter()
            write()
            warmups.append(time.perf_counter() - t0)
            shutil.rmtree(out_dir, ignore_errors=True)
        if warmups:
            shown = ", ".join(f"{w:.1f} s" for w in warmups)
            print(f"   warm-up write(s): {shown} (not counted)", flush=True)
        runs = []
        for repeat in range(args.repeats):
            shutil.rmtree(out_dir, ignore_errors=True)
            os.sync()
            waited = wait_for_quiet(args.quiet_wait) if args.quiet_wait else 0.0
            load_before = load()
            with CpuWatch(roots + [os.getpid()]) as watch:
                t0 = time.perf_counter()
                write()
                elapsed = time.perf_counter() - t0
            with open(os.path.join(out_dir, "_manifest.json")) as stream:
                shards = json.load(stream)["shards"]
            assert sum(s["samples"] for s in shards) == rows
            written = sum(s["bytes"] for s in shards)
            shutil.rmtree(out_dir, ignore_errors=True)
            run = {
                "seconds": elapsed,
                "payload_mb_s": payload / MB / elapsed,
                "written_bytes": written,
                "shards": len(shards),
                "load_before": load_before,
                "load_after": load(),
                "waited_for_quiet_s": waited,
                "our_cpu_s": watch.ours,
                "effective_cores": watch.ours / elapsed,
                "mb_per_cpu_s": payload / MB / watch.ours if watch.ours else None,
                "our_cpu_share": watch.ours_share,
                "other_cpu_share": watch.other_share,
            }
            runs.append(run)
            print(
                f"   {cores} core(s) run {repeat + 1}/{args.repeats}: {elapsed:6.2f} s "
                f"{run['payload_mb_s']:7.1f} MB/s, "
                f"{len(shards)} shards; our CPU {watch.ours:5.1f} s = {watch.ours / elapsed:.2f} cores, "
                f"others {watch.other_share:4.0%}; load {load_before}",
                flush=True,
            )
        df.unpersist(blocking=True)
        return {
            "cores": cores,
            "granted": granted,
            "cache_seconds": cache_s,
            "cached": cached,
            "warmup_seconds": warmups,
            "runs": runs,
        }
    finally:
        spark.stop()  # the next session gets a new SparkContext: a new application, new executors


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--total-bytes", type=parse_size, default=None, help="payload (default 1.5GB)")
    parser.add_argument("--sample-bytes", type=parse_size, default=100 * 1024)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--max-shard-bytes", type=parse_size, default=256 * MIB)
    parser.add_argument("--cores", default="1,2", help="spark.cores.max values, comma list")
    parser.add_argument("--rounds", type=int, default=None, help="sessions per core count (default 2)")
    parser.add_argument("--repeats", type=int, default=None, help="writes per session (default 2)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed writes per session first (default 1)")
    parser.add_argument(
        "--quiet-wait", type=float, default=60.0,
        help="before each timed write, wait up to this many s for the machine to be under 25%% busy "
        "(0: no wait)",
    )
    parser.add_argument(
        "--max-other-cpu", type=float, default=0.10,
        help="a run is clean if everything else used at most this share of the machine (default 0.10)",
    )
    parser.add_argument("--executor-memory", default="4g")
    parser.add_argument("--worker-memory", default="5g")
    parser.add_argument("--tmp", default="/tmp")
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "cluster_scaling.json"))
    args = parser.parse_args(argv)
    if args.total_bytes is None:
        args.total_bytes = 100 * MIB if args.quick else int(1.5e9)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.repeats = args.repeats or (1 if args.quick else 2)
    args.cores = [int(c) for c in args.cores.split(",")]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="bench-cluster-", dir=args.tmp)
    state = os.path.join(workdir, "cluster")
    env = cluster_env(args, state)
    results: dict[str, Any] = {
        "config": dict(vars(args)),
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
            "python": platform.python_version(),
        },
        "load_start": load(),
        "configs": [],
    }
    started = time.perf_counter()
    zip_path = build_zip(workdir)
    started_cluster = subprocess.run(
        [str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=240
    )
    try:
        if started_cluster.returncode != 0:
            raise RuntimeError(f"cluster did not start: {started_cluster.stderr}")
        master = started_cluster.stdout.strip().splitlines()[-1]
        roots = [int(Path(state, f"{role}.pid").read_text()) for role in ("master", "worker")]
        import pyspark

        results["machine"]["pyspark"] = pyspark.__version__
        results["cluster"] = {"master": master, "worker_cores": 2, "worker_memory": args.worker_memory}
        rows = max(1, args.total_bytes // args.sample_bytes)
        print(
            f"cluster {master}; {rows} x {args.sample_bytes / 1024:.0f} KiB "
            f"({rows * args.sample_bytes / MB:.0f} MB) "
            f"in {args.partitions} partitions, maxShardBytes {args.max_shard_bytes / MIB:.0f} MiB",
            flush=True,
        )
        for round_number in range(args.rounds):
            for cores in args.cores:
                print(f"\n== round {round_number + 1}/{args.rounds}, spark.cores.max={cores}", flush=True)
                entry = run_config(args, env, master, cores, zip_path, workdir, roots)
                entry["round"] = round_number
                results["configs"].append(entry)
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, timeout=60)
        shutil.rmtree(workdir, ignore_errors=True)
    payload = max(1, args.total_bytes // args.sample_bytes) * args.sample_bytes
    results["payload_bytes"] = payload
    summarize(results, args.cores, args.max_other_cpu)
    results["load_end"] = load()
    results["seconds"] = time.perf_counter() - started
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as stream:
        json.dump(results, stream, indent=1)
    print_report(results, args.sample_bytes)
    print(f"results: {args.output}")


def _stats(runs: list[dict[str, Any]], payload: int) -> dict[str, Any] | None:
    if not runs:
        return None
    times = [r["seconds"] for r in runs]
    return {
        "runs": len(runs),
        "best_s": min(times),
        "median_s": statistics.median(times),
        "best_mb_s": payload / MB / min(times),
        "median_mb_s": payload / MB / statistics.median(times),
        "median_effective_cores": statistics.median(r["effective_cores"] for r in runs),
        "median_other_cpu_share": statistics.median(r["other_cpu_share"] for r in runs),
        "median_mb_per_cpu_s": statistics.median(r["mb_per_cpu_s"] for r in runs if r["mb_per_cpu_s"]),
    }


def summarize(results: dict[str, Any], core_counts: list[int], max_other_cpu: float) -> None:
    """Per core count: every timed run ("all"), and the runs where everything else used at most
    `max_other_cpu` of the machine ("clean"); speedups of 2 cores over 1 for both."""
    payload = results["payload_bytes"]
    results["max_other_cpu"] = max_other_cpu
    summary: dict[str, Any] = {}
    for cores in core_counts:
        runs = [r for c in results["configs"] if c["cores"] == cores for r in c["runs"]]
        summary[str(cores)] = {
            "all": _stats(runs, payload),
            "clean": _stats([r for r in runs if r["other_cpu_share"] <= max_other_cpu], payload),
        }
    results["summary"] = summary
    if "1" in summary and "2" in summary:
        speedups = {}
        for kind in ("all", "clean"):
            one, two = summary["1"][kind], summary["2"][kind]
            if one and two:
                speedups[kind] = {
                    "best": one["best_s"] / two["best_s"],
                    "median": one["median_s"] / two["median_s"],
                }
        results["speedup_2_vs_1"] = speedups


def print_report(results: dict[str, Any], sample_bytes: int) -> None:
    print("\n" + "=" * 100)
    print(
        f"{results['payload_bytes'] / MB:.0f} MB payload, {sample_bytes / 1024:.0f} KiB samples; "
        "MB = 10^6 B; "
        f"clean = runs while everything else used <= {results['max_other_cpu']:.0%} of the machine"
    )
    print(
        f"{'cores':>5} {'runs':>10} {'best s':>8} {'median s':>9} {'best MB/s':>10} {'median MB/s':>12} "
        f"{'cores used':>11} {'others':>7} {'MB/CPU-s':>9}"
    )
    for cores, kinds in results["summary"].items():
        for kind, s in kinds.items():
            if not s:
                print(f"{cores:>5} {kind:>6}    0")
                continue
            print(
                f"{cores:>5} {kind:>6} {s['runs']:3d} {s['best_s']:8.2f} {s['median_s']:9.2f} "
                f"{s['best_mb_s']:10.1f} {s['median_mb_s']:12.1f} {s['median_effective_cores']:11.2f} "
                f"{s['median_other_cpu_share']:7.0%} {s['median_mb_per_cpu_s']:9.1f}"
            )
    for kind, sp in results.get("speedup_2_vs_1", {}).items():
        print(f"speedup 2 vs 1 core ({kind} runs): best {sp['best']:.2f}x, median {sp['median']:.2f}x")
    print(f"load average: start {results['load_start']}, end {results['load_end']}")


if __name__ == "__main__":
    main()
