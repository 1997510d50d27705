"""What the benchmarks share: paths, sizes, load and CPU, random data, RSS sampling, a no-op
writer, output.

Import it first (`from common import ...` works because Python puts bench/ on sys.path when a
benchmark runs as a script): it puts plugins/ on sys.path and sets the environment
Spark's Python workers need.
"""

from __future__ import annotations

import json
import os
import shutil
import platform
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

REPO = Path(__file__).resolve().parents[1]
PLUGINS = str(REPO / "plugins")
RESULTS = REPO / "bench" / "results"

if PLUGINS not in sys.path:
    sys.path.insert(0, PLUGINS)
# Spark's Python workers (started by the JVM we start) import this module by name (random_rows,
# the no-op writer); the package itself they find installed (or as --py-files on a cluster).
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "bench"), os.environ.get("PYTHONPATH", "")) if p)
os.environ["PYSPARK_PYTHON"] = sys.executable  # workers run the interpreter that runs the benchmark
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

MIB = 1024**2
GIB = 1024**3
MB = 1e6
ARROW_CONFS = (
    "spark.sql.execution.arrow.maxRecordsPerBatch",
    "spark.sql.execution.arrow.maxBytesPerBatch",
    "spark.python.worker.reuse",
)


# -- sizes and load -------------------------------------------------------------


def parse_size(text: str) -> int:
    """'3GiB', '512KiB', '10MB', '1024' -> bytes: the package's own parser (format/sizes.py).

    Imported when called, not with this module: read_throughput.py puts another copy of the
    package ahead on sys.path after importing common.
    """
    from spark_webdataset.format.sizes import parse_size as parse

    return parse(text)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (all cores)."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    guest = getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)  # already in user/nice
    return sum(times) - idle - guest


def wait_for_quiet(limit_s: float, share: float = 0.25) -> float:
    """Wait (at most `limit_s`) until the machine is under `share` busy for 2 s in a row; seconds waited.

    Called between runs, when this benchmark's own processes are idle, so what is measured is
    everyone else.
    """
    started = time.perf_counter()
    quiet = 0
    cores = os.cpu_count() or 1
    while time.perf_counter() - started < limit_s and quiet < 2:
        before = busy_seconds()
        time.sleep(1.0)
        quiet = quiet + 1 if (busy_seconds() - before) / cores < share else 0
    return time.perf_counter() - started


def tree_bytes(directory: str, suffix: str = "") -> tuple[int, int]:
    """(bytes, files) of every regular file below `directory` whose name ends with `suffix`."""
    total = files = 0
    for root, _, names in os.walk(directory):
        for name in names:
            if name.endswith(suffix):
                total += os.path.getsize(os.path.join(root, name))
                files += 1
    return total, files


# -- data -------------------------------------------------------------------------


def random_batch(ids: np.ndarray, sample_bytes: int, rng: np.random.Generator) -> pa.RecordBatch:
    """(__key__ '%08d', bin random bytes, cls id % 10) for `ids`."""
    count = len(ids)
    wide = sample_bytes * count >= 2**31
    offsets = np.arange(count + 1, dtype=np.int64 if wide else np.int32) * sample_bytes
    binary_type = pa.large_binary() if wide else pa.binary()
    payload = pa.Array.from_buffers(
        binary_type, count, [None, pa.py_buffer(offsets), pa.py_buffer(rng.bytes(sample_bytes * count))]
    )
    keys = pa.array([f"{i:08d}" for i in ids.tolist()], pa.string())
    return pa.RecordBatch.from_arrays(
        [keys, payload, pa.array((ids % 10).astype(np.int32))], names=["__key__", "bin", "cls"]
    )


def random_rows(sample_bytes: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: ids -> random rows, in batches of at most 16 MiB."""
    rng = np.random.default_rng()
    rows_per_batch = max(1, (16 * MIB) // sample_bytes)
    for batch in batches:
        ids = batch.column(0).to_numpy()
        for start in range(0, len(ids), rows_per_batch):
            yield random_batch(ids[start : start + rows_per_batch], sample_bytes, rng)


# -- Spark ----------------------------------------------------------------------------


def local_spark(
    cores: int,
    app_name: str,
    local_dir: str,
    driver_memory: str = "2g",
    confs: dict[str, str] | None = None,
    sources: Sequence[type] = (),
) -> Any:
    """A local[cores] session, UI and progress bars off, quiet logs; `format("webdataset")`
    registered and the data sources in `sources`."""
    from pyspark.sql import SparkSession

    import spark_webdataset

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", local_dir)
    )
    for key, value in (confs or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark_webdataset.register(spark)
    for source in sources:
        spark.dataSource.register(source)
    return spark


def arrow_confs(spark: Any) -> dict[str, str | None]:
    """The session's ARROW_CONFS (None where this Spark does not know one)."""
    found: dict[str, str | None] = {}
    for key in ARROW_CONFS:
        try:
            found[key] = spark.conf.get(key)
        except Exception:  # noqa: BLE001 - not a registered conf in this version
            found[key] = None
    return found


def sha_frame(spark: Any, rows: int, sample_bytes: int, partitions: int, key_format: str = "%08d") -> Any:
    """`__key__` (key_format of id), `bin` = sha2(id) hex repeated to exactly sample_bytes; made in
    the JVM, so no Python worker runs."""
    repeats = -(-sample_bytes // 64)
    return spark.range(rows, numPartitions=partitions).selectExpr(
        f"format_string('{key_format}', id) AS __key__",
        f"CAST(substr(repeat(sha2(CAST(id AS STRING), 256), {repeats}), 1, {sample_bytes}) AS BINARY) AS bin",
    )


# -- memory ------------------------------------------------------------------------


class RssSampler:
    """Every `interval` s: the RSS of every process `select(process)` names a role for; peaks per pid."""

    def __init__(
        self,
        select: Callable[[psutil.Process], str | None],
        interval: float = 0.1,
        candidates: Callable[[], list[psutil.Process]] | None = None,
    ) -> None:
        self.select = select
        self._candidates = candidates or (lambda: psutil.Process().children(recursive=True))
        self.interval = interval
        self.roles: dict[int, str | None] = {}
        self.peaks: dict[int, int] = {}
        self.first: dict[int, int] = {}  # RSS when first seen in this window
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        for process in self._candidates():
            try:
                if process.pid not in self.roles:
                    self.roles[process.pid] = self.select(process)
                if not self.roles[process.pid]:
                    continue
                rss = process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            self.first.setdefault(process.pid, rss)
            self.peaks[process.pid] = max(rss, self.peaks.get(process.pid, 0))
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "RssSampler":
        self.peaks.clear()
        self.first.clear()
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

    def peak_mib(self, role: str) -> float:
        return max((rss for pid, rss in self.peaks.items() if self.roles.get(pid) == role), default=0) / MIB

    def by_process(self) -> list[dict[str, Any]]:
        return [
            {
                "pid": pid,
                "role": self.roles.get(pid),
                "first_rss_mib": round(self.first.get(pid, 0) / MIB, 1),
                "peak_rss_mib": round(rss / MIB, 1),
            }
            for pid, rss in sorted(self.peaks.items())
        ]



# -- a writer that writes nothing (the cost of Spark's Arrow path alone) ----------


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
            rows += batch.num_rows
            batches += 1
            max_rows = max(max_rows, batch.num_rows)
            max_bytes = max(max_bytes, batch.nbytes)
        return NoopCommitMessage(rows, batches, max_rows, max_bytes)

    def commit(self, messages: list[NoopCommitMessage | None]) -> None:
        found = [m for m in messages if m is not None]
        summary = {
            "rows": sum(m.rows for m in found),
            "batches": sum(m.batches for m in found),
            "max_batch_rows": max((m.max_batch_rows for m in found), default=0),
            "max_batch_bytes": max((m.max_batch_bytes for m in found), default=0),
        }
        with open(self.report, "w") as stream:
            json.dump(summary, stream)

    def abort(self, messages: list[NoopCommitMessage | None]) -> None:
        pass


class NoopDataSource(DataSource):
    """format("bench_arrow_noop"): NoopArrowWriter; save(path) names the JSON report."""

    @classmethod
    def name(cls) -> str:
        return "bench_arrow_noop"

    def writer(self, schema: StructType, overwrite: bool) -> NoopArrowWriter:
        return NoopArrowWriter(self.options["path"])


# -- a writer profiled inside the Python worker ----------------------------------------


class ProfiledArrowWriter(DataSourceArrowWriter):
    """Runs another Arrow writer's `write` under cProfile in the Python worker (py-spy is not
    installed); one .prof file per task in `directory`, merged by `merged_profile`. The Arrow
    batches arrive through the iterator inside `write`, so their hand-off is in the profile too.
    With `cpu` the profile counts the worker's CPU time, not wall time: on a shared machine wall
    time also counts the time the worker waited for a core."""

    def __init__(self, inner: DataSourceArrowWriter, directory: str, cpu: bool = True) -> None:
        self.inner = inner
        self.directory = directory
        self.cpu = cpu

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        import cProfile

        from pyspark import TaskContext

        context = TaskContext.get()
        task = f"p{context.partitionId()}-t{context.taskAttemptId()}" if context else f"pid{os.getpid()}"
        profile = cProfile.Profile(time.process_time) if self.cpu else cProfile.Profile()
        profile.enable()
        try:
            return self.inner.write(iterator)
        finally:
            profile.disable()
            os.makedirs(self.directory, exist_ok=True)
            profile.dump_stats(os.path.join(self.directory, f"{task}.prof"))

    def commit(self, messages: list[Any]) -> None:
        self.inner.commit(messages)

    def abort(self, messages: list[Any]) -> None:
        self.inner.abort(messages)


class ProfiledWebDataset(DataSource):
    """format("webdataset_profiled"): the webdataset writer under ProfiledArrowWriter; option
    `profileDir` names the folder for the .prof files, `profileClock` is "cpu" (default) or "wall",
    the rest go to the webdataset writer."""

    @classmethod
    def name(cls) -> str:
        return "webdataset_profiled"

    def writer(self, schema: StructType, overwrite: bool) -> ProfiledArrowWriter:
        from spark_webdataset.spark.options import WriteOptions
        from spark_webdataset.spark.writer import WebDatasetWriter

        options = {k: v for k, v in self.options.items() if k.lower() not in ("profiledir", "profileclock")}
        inner = WebDatasetWriter(WriteOptions.parse(options), schema, overwrite)
        cpu = self.options.get("profileClock", "cpu") == "cpu"
        return ProfiledArrowWriter(inner, self.options["profileDir"], cpu)


def merged_profile(directory: str, top: int = 25) -> list[dict[str, Any]]:
    """The .prof files in `directory` merged: the `top` functions by own time, with cumulative time."""
    import pstats

    files = sorted(str(p) for p in Path(directory).glob("*.prof"))
    if not files:
        return []
    stats = pstats.Stats(files[0])
    for path in files[1:]:
        stats.add(path)
    entries = stats.stats.items()  # type: ignore[attr-defined]
    ranked = sorted(entries, key=lambda item: item[1][2], reverse=True)[:top]
    return [
        {
            "function": f"{Path(file).name}:{line}({func})",
            "calls": values[1],
            "tottime_s": round(values[2], 4),
            "cumtime_s": round(values[3], 4),
        }
        for (file, line, func), values in ranked
    ]


# -- output -------------------------------------------------------------------------


def machine(**extra: Any) -> dict[str, Any]:
    """What a result was measured on."""
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        **extra,
    }


def write_results(path: str | os.PathLike[str], results: dict[str, Any]) -> None:
    """The benchmark's JSON (bench/results/<name>.json by default; the folder is gitignored)."""
    os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
    with open(path, "w") as stream:
        json.dump(results, stream, indent=1, default=str)  # default: Paths and the like as text
    print(f"results: {path}")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain text table: right-aligned columns as wide as their widest cell."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for number, row in enumerate(cells):
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
        if number == 0:
            print("  ".join("-" * width for width in widths))


# -- GCS emulator ---------------------------------------------------------------------------


def start_emulator(bucket: str, memory_limit: str | None = None) -> Any:
    """fake-gcs-server on a free port with `bucket`; every client (and, started before any
    SparkSession, the JVM's Python workers) pointed at it. `memory_limit` becomes its GOMEMLIMIT."""
    from spark_webdataset.testing.gcs_emulator import Emulator

    previous = os.environ.pop("GOMEMLIMIT", None)
    if memory_limit:
        os.environ["GOMEMLIMIT"] = memory_limit
    try:
        emulator = Emulator()
    finally:
        os.environ.pop("GOMEMLIMIT", None)
        if previous is not None:
            os.environ["GOMEMLIMIT"] = previous
    os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
    emulator.create_bucket(bucket)
    return emulator


def stop_emulator(emulator: Any) -> None:
    emulator.stop()
    shutil.rmtree(emulator.root, ignore_errors=True)
