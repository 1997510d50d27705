"""The benchmark harness: cases of contenders timed side by side with their baselines.

A benchmark is one small module: it declares a `Benchmark` (its name, flags, what --quick
shrinks, and `run`), and `run` builds `Case`s (a workload, its contenders, which ratios to
report against which baseline and target) and hands each to `measure`. Why: every figure in
bench/README.md is a ratio of two things measured in one process run, interleaved round by
round, so what else this shared machine runs hits ours and the baseline alike.

The harness gives every benchmark the same flags (--quick, --repeats, --warmup, --quiet-wait,
--max-other-cpu, --max-attempts, --tmp, --output, --plugins, --no-rotate, --no-sync), the same measurement (wall time,
CPU of our processes, the share of the machine everyone else used), one table printer, and the
results in bench/results/<name>.json (<name>.quick.json with --quick; the folder is gitignored).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import platform
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


_early = argparse.ArgumentParser(add_help=False)
_early.add_argument("--plugins", default=str(REPO / "plugins"))  # measure another copy of the package
PLUGINS = os.path.abspath(_early.parse_known_args()[0].plugins)
sys.path.insert(0, PLUGINS)
sys.path.insert(
    1, str(REPO)
)  # the test support's GCS emulator launcher (tests/support/gcs_emulator.py): not in the wheel
# Spark's Python workers (below the JVM we start) inherit this environment: they import the
# package from PLUGINS and this module by name (random_rows, the no-op writer).
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (PLUGINS, str(REPO / "bench"), os.environ.get("PYTHONPATH", "")) if p
)
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage  # noqa: E402

MIB, GIB, MB = 1024**2, 1024**3, 1e6


def parse_size(text: str) -> int:
    """'3GiB', '512KiB', '10MB', '1024' -> bytes: the package's own parser."""
    from spark_webdataset.format.sizes import parse_size as parse

    return parse(text)


# -- the case table -------------------------------------------------------------


@dataclass
class Contender:
    """One thing timed. Only `run` is timed; `prepare` (before each run) and `check` (after: verify,
    clean up, report sizes) are not. A dict `run` or `check` returns is merged into the run's
    record; a contender that must time only part of its run (say, a write inside a session it
    had to start) returns its own "seconds" (and "our_cpu_s", "other_cpu_share")."""

    run: Callable[[], Any]
    work: float = 1.0  # units one run does (payload bytes, shards, keys): rate = work / scale / s
    prepare: Callable[[], Any] | None = None
    check: Callable[[Any], dict[str, Any] | None] | None = None


@dataclass
class Ratio:
    """ours' rate over the baseline's (work per second); `target` is its minimum. Reported by wall
    time and by CPU seconds; `by` says which the verdict uses."""

    ours: str
    baseline: str
    target: float | None = None
    by: str = "wall"


@dataclass
class Case:
    """A workload and every contender on it, measured in the same rounds."""

    name: str
    contenders: dict[str, Contender]
    ratios: list[Ratio] = field(default_factory=list)
    unit: str = "MB"
    scale: float = MB
    min_rate: float | None = None  # an absolute target every contender's rate must meet (unit/s)
    worker_rss: bool = False  # sample the RSS of Spark's Python workers during each run
    info: dict[str, Any] = field(default_factory=dict)  # the workload, as stored in the JSON


@dataclass
class Benchmark:
    """A benchmark module's declaration; `main(BENCH)` runs it from the command line."""

    name: str  # the results file: bench/results/<name>.json
    doc: str
    run: Callable[[argparse.Namespace, str], dict[str, Any]]  # (args, work dir) -> results
    flags: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    quick: Callable[[argparse.Namespace], None] = lambda args: None  # shrink args for --quick
    defaults: dict[str, Any] = field(default_factory=dict)  # of the shared flags


# -- load and CPU ------------------------------------------------------------------


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (all cores)."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    guest = getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)  # already in user/nice
    return sum(times) - idle - guest


def wait_for_quiet(limit_s: float, share: float = 0.15) -> float:
    """Wait (at most `limit_s`) until the machine is under `share` busy for 2 s in a row; called
    between runs, when our processes are idle, so what is measured is everyone else."""
    started, quiet, cores = time.perf_counter(), 0, os.cpu_count() or 1
    while time.perf_counter() - started < limit_s and quiet < 2:
        before = busy_seconds()
        time.sleep(1.0)
        quiet = quiet + 1 if (busy_seconds() - before) / cores < share else 0
    return time.perf_counter() - started


class Meter:
    """Wall time; CPU of this process and its descendants (JVM, Python workers, reaped pool
    workers) and of `roots`' trees (a standalone cluster's daemons); the share of the machine's
    CPU everyone else used meanwhile (a run above --max-other-cpu is contended)."""

    def __init__(self, roots: Sequence[int] = ()) -> None:
        self.roots = list(roots)

    def _cpu(self) -> dict[int, float]:
        """CPU seconds of every live descendant and of the roots' trees, by pid (psutil: 10 ms ticks)."""
        tree = psutil.Process().children(recursive=True)
        for pid in self.roots:
            with contextlib.suppress(psutil.NoSuchProcess):
                tree += [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        used: dict[int, float] = {}
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                times = process.cpu_times()
                used[process.pid] = times.user + times.system
        return used

    @staticmethod
    def _own() -> float:
        """This process and its reaped children (a pool's workers), in microseconds' resolution."""
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def __enter__(self) -> Meter:
        self.load1 = os.getloadavg()[0]
        self._cpu0, self._own0, self._busy0 = self._cpu(), self._own(), busy_seconds()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        end = self._cpu()
        self.cpu = sum(v - self._cpu0.get(pid, 0.0) for pid, v in end.items()) + self._own() - self._own0
        capacity = self.seconds * (os.cpu_count() or 1)
        self.other = min(1.0, max(0.0, busy_seconds() - self._busy0 - self.cpu) / capacity) if capacity else 0.0

    def record(self) -> dict[str, float]:
        return {
            "seconds": round(self.seconds, 4),
            "our_cpu_s": round(self.cpu, 3),
            "other_cpu_share": round(self.other, 3),
            "load1": round(self.load1, 2),
        }


# -- memory ------------------------------------------------------------------------


def pyspark_role(process: psutil.Process) -> str | None:
    """'worker' for a Python process running tasks (forked by a pyspark.daemon below a JVM),
    'daemon' for the daemon, the module name for other pyspark processes; None for the rest."""
    command = " ".join(process.cmdline())
    if "java" in process.name() or "pyspark" not in command:
        return None
    if not any("java" in parent.name() for parent in process.parents()):
        return None
    parent = process.parent()
    forked = parent is not None and "pyspark.daemon" in " ".join(parent.cmdline())
    if "pyspark.daemon" in command or command.split()[-1] == "pyspark.worker":
        return "worker" if forked else "daemon"
    return f"{command.split()[-1].rsplit('.', 1)[-1][:40]}{'' if forked else ' daemon'}"


class RssSampler:
    """Every `interval` s the RSS of every process `select` names a role for; peaks per pid."""

    def __init__(
        self,
        select: Callable[[psutil.Process], str | None] = pyspark_role,
        interval: float = 0.1,
        candidates: Callable[[], list[psutil.Process]] | None = None,
    ) -> None:
        self.select, self.interval = select, interval
        self.candidates = candidates or (lambda: psutil.Process().children(recursive=True))
        self.roles: dict[int, str | None] = {}
        self.peaks: dict[int, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        for process in self.candidates():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                if process.pid not in self.roles:
                    self.roles[process.pid] = self.select(process)
                if self.roles[process.pid]:
                    rss = process.memory_info().rss
                    self.peaks[process.pid] = max(rss, self.peaks.get(process.pid, 0))
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> RssSampler:
        self.peaks.clear()
        self.samples = 0
        self._stop.clear()
        self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.sample()

    def peak_mib(self, role: str = "worker") -> float:
        return round(max((v for pid, v in self.peaks.items() if self.roles.get(pid) == role), default=0) / MIB, 1)

    def by_process(self) -> list[dict[str, Any]]:
        return [
            {"pid": pid, "role": self.roles.get(pid), "peak_rss_mib": round(rss / MIB, 1)}
            for pid, rss in sorted(self.peaks.items())
        ]


def peak_rss_run(run: Callable[[], Any]) -> dict[str, Any]:
    """One run with the RSS of Spark's Python processes sampled every 0.1 s: why a write's
    memory is measured once per fresh session, apart from the timed cases."""
    with Meter() as meter, RssSampler() as rss:
        run()
    return {
        **meter.record(),
        "peak_worker_rss_mib": rss.peak_mib("worker"),
        "peak_daemon_rss_mib": rss.peak_mib("daemon"),
        "rss_samples": rss.samples,
        "processes": rss.by_process(),
    }


# -- measuring ------------------------------------------------------------------


def _run_once(contender: Contender, worker_rss: bool, quiet_wait: float, sync: bool = True) -> dict[str, Any]:
    if contender.prepare:
        contender.prepare()
    if sync:
        os.sync()  # what earlier runs (and their clean-up) left dirty is written back now, untimed
    if quiet_wait:
        wait_for_quiet(quiet_wait)
    rss = RssSampler() if worker_rss else None
    with Meter() as meter, rss or contextlib.nullcontext():
        value = contender.run()
    record: dict[str, Any] = meter.record()
    if rss:
        record["max_worker_rss_mib"] = rss.peak_mib("worker")
    if isinstance(value, dict):
        record.update(value)
    if contender.check:
        record.update(contender.check(value) or {})
    if sync:
        started = time.perf_counter()
        os.sync()  # this run's own writeback, untimed: not charged to the next contender
        record["sync_after_s"] = round(time.perf_counter() - started, 3)
    return record


def _summary(
    records: list[dict[str, Any]], work: float, case: Case, max_other: float, clean_only: bool = True
) -> dict[str, Any]:
    timed = [r for r in records if not r["warmup"]]
    clean = [r for r in timed if r["other_cpu_share"] <= max_other]
    kept = (clean if clean_only else []) or timed
    best = min(kept, key=lambda r: r["seconds"])
    cpu = min(r["our_cpu_s"] for r in kept)
    rate = work / case.scale / best["seconds"]
    return {
        "best_s": best["seconds"],
        "median_s": statistics.median(r["seconds"] for r in kept),
        "rate": rate,
        "best_cpu_s": cpu,
        "rate_per_cpu_s": work / case.scale / cpu if cpu > 0 else None,
        "other_cpu_share": best["other_cpu_share"],
        "contended": not clean,
        "met": None if case.min_rate is None else rate >= case.min_rate,
        "work": work,
        "runs": records,
    }


def summarize(runs: dict[str, list[dict[str, Any]]], case: Case, max_other: float) -> dict[str, Any]:
    """Each contender's best and median. Like with like: only clean runs when every contender has
    one, else every timed run of every contender (a quiet run of ours against only contended runs
    of the baseline made a ratio no run showed)."""

    def has_clean(records: list[dict[str, Any]]) -> bool:
        return any(not r["warmup"] and r["other_cpu_share"] <= max_other for r in records)

    clean_only = all(has_clean(runs[name]) for name in case.contenders)
    return {n: _summary(runs[n], c.work, case, max_other, clean_only) for n, c in case.contenders.items()}


def measure(
    case: Case, args: argparse.Namespace, repeats: int | None = None, warmup: int | None = None
) -> dict[str, Any]:
    """Every contender `warmup` times untimed, then `repeats` rounds, interleaved; a contended run
    (others above --max-other-cpu) is retried up to --max-attempts. Best and median of the clean
    runs (of all, if none was clean); the case's ratios."""
    repeats = args.repeats if repeats is None else repeats
    warmup = args.warmup if warmup is None else warmup
    print(f"\n== {case.name} {case.info or ''}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in case.contenders}
    names = list(case.contenders)
    for round_ in range(-warmup, repeats):
        # Each timed round starts one contender later: no contender always runs right after the
        # same neighbour (a writer after the workaround's 2 GB of writes paid their writeback).
        shift = round_ % len(names) if round_ >= 0 and getattr(args, "rotate", True) else 0
        for name in names[shift:] + names[:shift]:
            contender = case.contenders[name]
            for _ in range(args.max_attempts if round_ >= 0 else 1):
                record = _run_once(
                    contender, case.worker_rss, args.quiet_wait if round_ >= 0 else 0.0, getattr(args, "sync", True)
                )
                record["warmup"] = round_ < 0
                runs[name].append(record)
                clean = record["other_cpu_share"] <= args.max_other_cpu
                rate = contender.work / case.scale / record["seconds"] if record["seconds"] else 0.0
                print(
                    f"   {'warm-up' if round_ < 0 else f'run {round_ + 1}/{repeats}':>9} {name:<26} "
                    f"{record['seconds']:8.3f} s {rate:10.1f} {case.unit}/s  cpu {record['our_cpu_s']:6.2f} s  "
                    f"others {record['other_cpu_share']:4.0%}{'' if clean else ' (contended)'}",
                    flush=True,
                )
                if clean or round_ < 0:
                    break
    summary = summarize(runs, case, args.max_other_cpu)
    ratios = []
    for ratio in case.ratios:
        ours, base = summary[ratio.ours], summary[ratio.baseline]
        wall = ours["rate"] / base["rate"]
        cpu = (ours["rate_per_cpu_s"] or 0) / base["rate_per_cpu_s"] if base["rate_per_cpu_s"] else None
        judged = wall if ratio.by == "wall" else cpu
        ratios.append({
            "ours": ratio.ours, "baseline": ratio.baseline, "wall": round(wall, 3),
            "cpu": None if cpu is None else round(cpu, 3), "target": ratio.target, "by": ratio.by,
            "met": None if ratio.target is None or judged is None else judged >= ratio.target,
        })  # fmt: skip
    return {"case": case.name, **case.info, "unit": case.unit, "min_rate": case.min_rate,
            "contenders": summary, "ratios": ratios}  # fmt: skip


@contextlib.contextmanager
def commit_phases_timed() -> Iterator[dict[str, float]]:
    """commit_job's two phases that grow with the shards (the index merge, the renames) timed where
    it looks them up: `<phase>_s` wall seconds in the yielded dict once each has run."""
    from spark_webdataset.dataset import commit as commit_module
    from spark_webdataset.dataset import journal as journal_module

    phases: dict[str, float] = {}
    saved = {(commit_module.CommitPlan, "merge_index"): commit_module.CommitPlan.merge_index,
             (journal_module, "rename_all"): journal_module.rename_all}  # fmt: skip

    def timed(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                phases[f"{name}_s"] = round(time.perf_counter() - started, 3)

        return wrapper

    try:
        for (owner, name), original in saved.items():
            setattr(owner, name, timed(name, original))
        yield phases
    finally:
        for (owner, name), original in saved.items():
            setattr(owner, name, original)


def profiled(fn: Callable[[], Any], top: int = 15, clock: Callable[[], float] | None = None) -> list[dict[str, Any]]:
    """`fn` once under cProfile: the `top` functions by own time."""
    profile = cProfile.Profile(clock) if clock else cProfile.Profile()
    profile.runcall(fn)
    return top_functions(pstats.Stats(profile), top)


def top_functions(stats: pstats.Stats, top: int) -> list[dict[str, Any]]:
    entries = stats.stats.items()  # type: ignore[attr-defined]
    ranked = sorted(entries, key=lambda item: item[1][2], reverse=True)[:top]
    return [
        {"function": f"{Path(file).name}:{line}({func})", "calls": v[1], "tottime_s": round(v[2], 5),
         "cumtime_s": round(v[3], 5)}
        for (file, line, func), v in ranked
    ]  # fmt: skip


# -- data and Spark ----------------------------------------------------------------


def random_batch(ids: np.ndarray, sample_bytes: int, rng: np.random.Generator) -> pa.RecordBatch:
    """(__key__ '%08d', bin random bytes, cls id % 10) for `ids`."""
    count = len(ids)
    wide = sample_bytes * count >= 2**31
    offsets = np.arange(count + 1, dtype=np.int64 if wide else np.int32) * sample_bytes
    payload = pa.Array.from_buffers(
        pa.large_binary() if wide else pa.binary(), count,
        [None, pa.py_buffer(offsets), pa.py_buffer(rng.bytes(sample_bytes * count))],
    )  # fmt: skip
    keys = pa.array([f"{i:08d}" for i in ids.tolist()], pa.string())
    cls = pa.array((ids % 10).astype(np.int32))
    return pa.RecordBatch.from_arrays([keys, payload, cls], names=["__key__", "bin", "cls"])


def random_rows(sample_bytes: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: ids -> random rows, in batches of at most 16 MiB (runs in the workers)."""
    rng = np.random.default_rng()
    step = max(1, (16 * MIB) // sample_bytes)
    for batch in batches:
        ids = batch.column(0).to_numpy()
        for start in range(0, len(ids), step):
            yield random_batch(ids[start : start + step], sample_bytes, rng)


def random_frame(spark: Any, rows: int, sample_bytes: int, partitions: int) -> Any:
    """Random, incompressible payloads made by numpy in a mapInArrow (fast; uses Python workers)."""
    import functools

    return spark.range(rows, numPartitions=partitions).mapInArrow(
        functools.partial(random_rows, sample_bytes), "__key__ string, bin binary, cls int"
    )


def sha_frame(spark: Any, rows: int, sample_bytes: int, partitions: int, key_format: str = "%08d") -> Any:
    """`__key__`, `bin` = sha2(id) hex repeated to sample_bytes: made in the JVM, so no Python
    worker runs before the measured write."""
    repeats = -(-sample_bytes // 64)
    return spark.range(rows, numPartitions=partitions).selectExpr(
        f"format_string('{key_format}', id) AS __key__",
        f"CAST(substr(repeat(sha2(CAST(id AS STRING), 256), {repeats}), 1, {sample_bytes}) AS BINARY) AS bin",
    )


def cached(df: Any) -> tuple[Any, dict[str, int]]:
    """Cache and materialize; (df, what the block manager holds)."""
    df = df.cache()
    df.count()
    infos = df.sparkSession.sparkContext._jsc.sc().getRDDStorageInfo()  # type: ignore[union-attr]
    return df, {
        "memory_bytes": int(sum(i.memSize() for i in infos)),
        "disk_bytes": int(sum(i.diskSize() for i in infos)),
    }


def tree_bytes(directory: str, suffix: str = "") -> tuple[int, int]:
    """(bytes, files) of every file below `directory` whose name ends with `suffix`."""
    sizes = [os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(directory) for n in ns if n.endswith(suffix)]
    return sum(sizes), len(sizes)


def start_spark(
    master: str | int,
    local_dir: str,
    driver_memory: str = "2g",
    confs: dict[str, str] | None = None,
    sources: Sequence[type] = (),
    py_files: Sequence[str] = (),
) -> Any:
    """A session (`local[master]` for a number), UI and progress bars off, quiet logs;
    format("webdataset") and `sources` registered."""
    from pyspark.sql import SparkSession

    import spark_webdataset

    builder = SparkSession.builder.master(master if isinstance(master, str) else f"local[{master}]").appName("bench")
    settings = {"spark.driver.memory": driver_memory, "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false", "spark.local.dir": local_dir, **(confs or {})}  # fmt: skip
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for path in py_files:
        spark.sparkContext.addPyFile(path)
    spark_webdataset.register(spark)
    for source in sources:
        spark.dataSource.register(source)
    return spark


ARROW_CONFS = ("spark.sql.execution.arrow.maxRecordsPerBatch", "spark.sql.execution.arrow.maxBytesPerBatch",
               "spark.python.worker.reuse")  # fmt: skip


def arrow_confs(spark: Any) -> dict[str, str | None]:
    """The batch confs in effect (None where unset)."""
    return {key: spark.conf.get(key, None) for key in ARROW_CONFS}


@contextlib.contextmanager
def emulator(bucket: str, memory_limit: str | None = None) -> Iterator[Any]:
    """fake-gcs-server with `bucket`, every client pointed at it (enter it before any SparkSession:
    the JVM's Python workers inherit STORAGE_EMULATOR_HOST); `memory_limit` is its GOMEMLIMIT."""
    from tests.support.gcs_emulator import Emulator

    saved = {k: os.environ.get(k) for k in ("GOMEMLIMIT", "STORAGE_EMULATOR_HOST")}
    os.environ.pop("GOMEMLIMIT", None)
    if memory_limit:
        os.environ["GOMEMLIMIT"] = memory_limit
    server = Emulator()
    try:
        os.environ.pop("GOMEMLIMIT", None)
        os.environ["STORAGE_EMULATOR_HOST"] = server.url
        server.create_bucket(bucket)
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


# -- a writer that writes nothing: the cost of Spark's Arrow path alone -----------------


@dataclass
class NoopCommitMessage(WriterCommitMessage):
    rows: int
    batches: int
    max_batch_rows: int
    max_batch_bytes: int


class NoopArrowWriter(DataSourceArrowWriter):
    """Iterates the Arrow batches and nothing else; commit() writes what arrived to `report` (JSON)."""

    def __init__(self, report: str) -> None:
        self.report = report

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NoopCommitMessage:
        rows = batches = max_rows = max_bytes = 0
        for batch in iterator:
            rows, batches = rows + batch.num_rows, batches + 1
            max_rows, max_bytes = max(max_rows, batch.num_rows), max(max_bytes, batch.nbytes)
        return NoopCommitMessage(rows, batches, max_rows, max_bytes)

    def commit(self, messages: list[NoopCommitMessage | None]) -> None:
        found = [m for m in messages if m is not None]
        with open(self.report, "w") as stream:
            json.dump({"rows": sum(m.rows for m in found), "batches": sum(m.batches for m in found),
                       "max_batch_rows": max((m.max_batch_rows for m in found), default=0),
                       "max_batch_bytes": max((m.max_batch_bytes for m in found), default=0)}, stream)  # fmt: skip

    def abort(self, messages: list[NoopCommitMessage | None]) -> None:
        pass


class NoopDataSource(DataSource):
    """format("bench_arrow_noop"): NoopArrowWriter; save(path) names the JSON report."""

    @classmethod
    def name(cls) -> str:
        return "bench_arrow_noop"

    def writer(self, schema: Any, overwrite: bool) -> NoopArrowWriter:
        return NoopArrowWriter(self.options["path"])


# -- output and the command line -----------------------------------------------------


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 2) -> None:
    """A plain text table: columns as wide as their widest cell, the first `left` left-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for number, row in enumerate(cells):
        print("  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip())
        if number == 0:
            print("  ".join("-" * width for width in widths))


def report(cases: list[dict[str, Any]], max_other_cpu: float) -> None:
    """Every case's contenders and ratios: the one table all benchmarks print."""
    rows = []
    for case in cases:
        unit = case["unit"]
        for name, s in case["contenders"].items():
            per_cpu = f"{s['rate_per_cpu_s']:.1f}" if s["rate_per_cpu_s"] else "-"
            verdict = "" if s["met"] is None else (f">= {case['min_rate']:g}: " + ("met" if s["met"] else "NOT met"))
            rows.append([case["case"], name, f"{s['best_s']:.3f}", f"{s['median_s']:.3f}", f"{s['rate']:.1f} {unit}/s",
                         f"{s['best_cpu_s']:.2f}", per_cpu, f"{s['other_cpu_share']:.0%}",
                         "contended" if s["contended"] else "", verdict])  # fmt: skip
        for r in case["ratios"]:
            cpu = "-" if r["cpu"] is None else f"{r['cpu']:.2f}x"
            verdict = (
                "" if r["target"] is None else f">= {r['target']:g} by {r['by']}: " + ("met" if r["met"] else "NOT met")
            )
            rows.append([case["case"], f"{r['ours']} / {r['baseline']}", "", "", f"{r['wall']:.2f}x wall", cpu, "",
                         "", "", verdict])  # fmt: skip
    if rows:
        print(f"\nbest (and median) of the clean runs (others used <= {max_other_cpu:.0%} of the CPUs); MB = 10^6 B; "
              "cpu s = CPU of our processes in the least-CPU run; ratios = ours' rate / the baseline's")  # fmt: skip
        print_table(
            ["case", "contender", "best s", "median s", "rate", "cpu s", "per cpu-s", "others", "", "target"], rows
        )


def write_results(path: str | os.PathLike[str], results: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
    with open(path, "w") as stream:
        json.dump(results, stream, indent=1, default=str)
    print(f"results: {path}")


def main(bench: Benchmark, argv: list[str] | None = None) -> None:
    """Parse the shared and the benchmark's flags, run it in a temporary work dir, print its
    cases and notes, write its JSON."""
    parser = argparse.ArgumentParser(description=bench.doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--quick", action="store_true", help="smoke run: small sizes, few repeats (well under a minute or so)")
    add("--repeats", type=int, default=3, help="timed rounds (the best is reported)")
    add("--warmup", type=int, default=1, help="untimed rounds first")
    add("--quiet-wait", type=float, default=0.0, help="before each timed run wait up to this many s for idle CPUs")
    add("--max-other-cpu", type=float, default=1.0, help="a run while others used more of the CPUs is contended")
    add("--max-attempts", type=int, default=1, help="tries per timed run to get an uncontended one")
    add("--tmp", default=None, help="parent of the temporary work directory")
    add("--output", "--out", default=None, help="the JSON (default bench/results/<name>[.quick].json)")
    add("--plugins", default=PLUGINS, help="the spark_webdataset package's parent dir to measure")
    add(
        "--no-rotate",
        dest="rotate",
        action="store_false",
        help="keep the contenders' order in every round (default: each timed round starts one later)",
    )
    add(
        "--no-sync",
        dest="sync",
        action="store_false",
        help="no os.sync() before and after each run (default: each run's writeback is flushed untimed)",
    )
    bench.flags(parser)
    parser.set_defaults(**bench.defaults)
    args = parser.parse_args(argv)
    if args.quick:
        bench.quick(args)
    args.output = args.output or str(RESULTS / f"{bench.name}{'.quick' if args.quick else ''}.json")
    workdir = tempfile.mkdtemp(prefix=f"bench-{bench.name}-", dir=args.tmp)
    import pyspark

    results: dict[str, Any] = {
        "benchmark": bench.name, "command": " ".join([os.path.relpath(sys.executable, REPO), *sys.argv]),
        "config": dict(vars(args)), "package": PLUGINS, "load_start": load(),
        "machine": {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
                    "python": platform.python_version(), "pyarrow": pa.__version__, "pyspark": pyspark.__version__},
    }  # fmt: skip
    started = time.perf_counter()
    try:
        results.update(bench.run(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["load_end"], results["seconds"] = load(), round(time.perf_counter() - started, 1)
    report(results.get("cases", []), args.max_other_cpu)
    for note in results.get("notes", []):
        print(note)
    print(f"load average: start {results['load_start']}, end {results['load_end']}; {results['seconds']} s")
    write_results(args.output, results)
