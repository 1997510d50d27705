"""Shard upload throughput to the GCS emulator, and a writer task's peak RSS with 1 GiB shards.

    .venv/bin/python bench/gcs_upload_throughput.py            # full size (~25 minutes: the emulator is slow)
    .venv/bin/python bench/gcs_upload_throughput.py --quick    # smoke run

Starts fake-gcs-server (spark_webdataset.testing.gcs_emulator, filesystem backend, 127.0.0.1) and points every
client at it through STORAGE_EMULATOR_HOST, set before any SparkSession exists (Spark's Python
workers inherit their environment from the JVM).

Part 1, upload throughput, side by side in one run, interleaved, best of --repeats:

  open_write            storage_for("gs://...").open_write(path), the shard file's bytes written
                        in 1 MiB pieces (what a Spark task's ShardWriter does; 16 MiB resumable chunks)
  upload_from_filename  google-cloud-storage's blob.upload_from_filename(file) of the same file
                        (resumable, the library's default 100 MiB chunks)
  open_write_100MiB     diagnostic: open_write's BlobWriter with upload_from_filename's chunk size
  local_file            reference: LocalStorage.open_write, the same 1 MiB writes to local disk

Every upload is checked (size and crc32c read back). The CPU seconds the client (this process)
and the emulator process spent during each upload are recorded, as is the emulator's peak RSS.

Part 2, memory: a Spark write (local[2]) of --memory-total-bytes of --memory-sample-bytes samples
(`__key__` string, `bin` binary made in the JVM, so no Python worker runs before the write) with
maxShardBytes=1GiB to gs:// and to a local directory, while a thread samples the RSS of every
Python process below this driver's JVM every 0.1 s. Further runs vary the Arrow batch confs and
try a diagnostic writer (`webdataset_keycopy`: the same writer, but KeyRun.add keeps a copy of
the keys instead of a view into the Arrow batch); an Arrow writer that only iterates the batches
reports what batches Spark actually hands a Python data source writer.

The emulator (fake-gcs-server, fakestorage/upload.go) keeps a resumable upload in memory and, on
every chunk, appends it to the object's content and recomputes crc32c and md5 over everything
received so far: its CPU per object grows with (object size)^2 / chunk size and its memory with the
object size. Part 1 and part 2 each get their own emulator; part 2's runs with a soft memory limit
(GOMEMLIMIT, --emulator-memory-limit), and a guard kills the emulator if the machine's available
memory drops below --min-available-bytes (other benchmarks share the machine).

Results: bench/results/gcs_upload_throughput.json. MB = 10^6 bytes, MiB = 2^20.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from typing import Any, Callable

from common import (  # sets sys.path and the environment Spark's workers need
    GIB,
    MB,
    MIB,
    REPO,
    NoopDataSource,
    RssSampler,
    arrow_confs,
    load,
    local_spark,
    parse_size,
    sha_frame,
    start_emulator,
    stop_emulator,
)

import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql.types import StructType  # noqa: E402

from spark_webdataset.dataset.layout import Version  # noqa: E402
from spark_webdataset.spark.datasource import WebDatasetDataSource  # noqa: E402
from spark_webdataset.spark.writer import WebDatasetWriter  # noqa: E402

PIECE = MIB  # what the Spark task's ShardWriter hands the stream per 1 MiB sample
MEMORY_TARGET_MIB = 300
BUCKET = "bench-upload"


# -- process sampling ----------------------------------------------------------


def python_worker_role(process: psutil.Process) -> str | None:
    """'worker' for the Python processes that run tasks (forked by a pyspark.daemon), else a finer role.

    Only processes below a java process (the Spark JVM this driver launched) count.
    """
    command = " ".join(process.cmdline())
    if "java" in process.name() or not any(
        marker in command for marker in ("pyspark.daemon", "pyspark/worker", "pyspark.worker")
    ):
        return None
    if not any("java" in parent.name() for parent in process.parents()):
        return None
    module = command.split()[-1]
    parent = process.parent()
    forked = parent is not None and "pyspark.daemon" in " ".join(parent.cmdline())
    if module == "pyspark.worker":
        return "worker" if forked else "daemon"
    # planner / commit / create workers of the Python data source API
    return f"{module.rsplit('.', 1)[-1]}{'' if forked else ' daemon'}"


# -- part 1: upload throughput --------------------------------------------------


def make_file(path: str, size: int) -> str:
    """`size` random bytes at `path`; returns their crc32c as GCS reports it (base64)."""
    import base64

    import google_crc32c

    checksum = google_crc32c.Checksum()
    with open(path, "wb") as stream:
        left = size
        while left:
            piece = os.urandom(min(16 * MIB, left))
            checksum.update(piece)
            stream.write(piece)
            left -= len(piece)
    return base64.b64encode(checksum.digest()).decode()


def stream_file(path: str, sink: Any) -> None:
    with open(path, "rb", buffering=0) as source:
        buffer = bytearray(PIECE)
        view = memoryview(buffer)
        while True:
            n = source.readinto(buffer)
            if not n:
                break
            sink.write(view[:n])


def uploaders(bucket: str) -> dict[str, Callable[[str, str], str | None]]:
    """name -> fn(local file, object name) -> the URI written (None: not in GCS)."""
    from spark_webdataset.storage import storage_for
    from spark_webdataset.storage.gcs import _retry, client

    def open_write(local: str, name: str) -> str:
        uri = f"gs://{bucket}/{name}"
        with storage_for(uri).open_write(uri) as stream:
            stream_file(local, stream)
        return uri

    def upload_from_filename(local: str, name: str) -> str:
        client().bucket(bucket).blob(name).upload_from_filename(local)
        return f"gs://{bucket}/{name}"

    def open_write_100mib(local: str, name: str) -> str:
        blob = client().bucket(bucket).blob(name)
        blob.chunk_size = 100 * MIB
        with blob.open("wb", ignore_flush=True, retry=_retry()) as stream:
            stream_file(local, stream)
        return f"gs://{bucket}/{name}"

    def local_file(local: str, name: str) -> None:
        target = local + ".copy"
        with storage_for(target).open_write(target) as stream:
            stream_file(local, stream)
            stream.flush()
            os.fsync(stream.fileno())  # the emulator's filesystem backend does not fsync; see report
        os.remove(target)
        return None

    return {
        "open_write": open_write,
        "upload_from_filename": upload_from_filename,
        "open_write_100MiB": open_write_100mib,
        "local_file": local_file,
    }


def run_uploads(args: argparse.Namespace, emulator: Any, workdir: str) -> dict[str, Any]:
    import google.cloud.storage

    from spark_webdataset.storage.gcs import UPLOAD_CHUNK_BYTES, client

    fns = uploaders(BUCKET)
    emulator_process = psutil.Process(emulator.process.pid)
    me = psutil.Process()
    out: dict[str, Any] = {
        "google_cloud_storage": google.cloud.storage.__version__,
        "open_write_chunk_bytes": UPLOAD_CHUNK_BYTES,
        "upload_from_filename_chunk_bytes": 100 * MIB,
        "piece_bytes": PIECE,
        "sizes": [],
    }
    for size in args.sizes:
        local = os.path.join(workdir, f"shard-{size // MIB}MiB.tar")
        crc = make_file(local, size)
        print(f"\n== upload {size / MIB:.0f} MiB ({size / MB:.1f} MB), best of {args.repeats}", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in fns}
        for repeat in range(args.repeats):
            for name, fn in fns.items():
                object_name = f"{name}/{size // MIB}MiB-{repeat}.tar"
                emulator_rss = RssSampler(lambda p: "emulator", candidates=lambda: [emulator_process])
                cpu_me, cpu_emu = me.cpu_times(), emulator_process.cpu_times()
                load_before = load()
                with emulator_rss:
                    t0 = time.perf_counter()
                    uri = fn(local, object_name)
                    elapsed = time.perf_counter() - t0
                cpu_me2, cpu_emu2 = me.cpu_times(), emulator_process.cpu_times()
                client_cpu = (cpu_me2.user + cpu_me2.system) - (cpu_me.user + cpu_me.system)
                emulator_cpu = (cpu_emu2.user + cpu_emu2.system) - (cpu_emu.user + cpu_emu.system)
                if uri:
                    blob = client().bucket(BUCKET).get_blob(object_name)
                    assert blob is not None and blob.size == size, (name, blob and blob.size, size)
                    assert blob.crc32c == crc, (name, blob.crc32c, crc)
                    blob.delete()
                run = {
                    "seconds": elapsed,
                    "mb_s": size / MB / elapsed,
                    "client_cpu_s": client_cpu,
                    "emulator_cpu_s": emulator_cpu,
                    "emulator_peak_rss_mib": round(emulator_rss.peak_mib("emulator"), 1),
                    "load_before": load_before,
                }
                runs[name].append(run)
                print(
                    f"   {repeat + 1}/{args.repeats} {name:<21} {elapsed:7.2f} s {run['mb_s']:8.1f} MB/s   "
                    f"CPU client {client_cpu:5.2f} s emulator {emulator_cpu:5.2f} s   "
                    f"emulator RSS {run['emulator_peak_rss_mib']:6.0f} MiB   load {load_before}",
                    flush=True,
                )
        os.remove(local)
        best = {name: max(r["mb_s"] for r in rs) for name, rs in runs.items()}
        out["sizes"].append(
            {
                "bytes": size,
                "runs": runs,
                "best_mb_s": best,
                "ratio_open_write_vs_upload_from_filename": best["open_write"] / best["upload_from_filename"],
            }
        )
    return out


# -- part 2: memory --------------------------------------------------------------


class KeyCopyWriter(WebDatasetWriter):
    """Diagnostic: the webdataset writer with KeyRun.add keeping a copy of the keys.

    KeyRun.add keeps `keys.cast(large_string)`; Arrow's string->large_string cast shares the
    value buffer, which is a slice of the whole IPC message body Spark sent (every column of
    the batch), so each batch's body stays alive until the task ends. concat_arrays copies.
    """

    def write(self, iterator):  # type: ignore[override]
        import pyarrow as pa

        from spark_webdataset.format import keys

        def add(run, column):  # noqa: ANN001
            run._chunks.append(pa.concat_arrays([column.cast(pa.large_string())]))

        keys.KeyRun.add = add
        return super().write(iterator)


class KeyCopyDataSource(WebDatasetDataSource):
    @classmethod
    def name(cls) -> str:
        return "webdataset_keycopy"

    def writer(self, schema: StructType, overwrite: bool):  # type: ignore[override]
        from spark_webdataset.spark.options import WriteOptions

        return KeyCopyWriter(WriteOptions.parse(self.options), schema, overwrite, self.application_id)


def start_spark(args: argparse.Namespace, workdir: str, overrides: dict[str, str] | None = None):
    """A fresh local[2] session (and so fresh Python workers: each run's peak is its own)."""
    return local_spark(2, "bench-gcs-upload", workdir, "2g", overrides, [NoopDataSource, KeyCopyDataSource])


def memory_frame(spark: Any, rows: int, sample_bytes: int, partitions: int):
    """`__key__` '%06d', `bin` = sha2(id) hex repeated to exactly sample_bytes; made in the JVM."""
    return sha_frame(spark, rows, sample_bytes, partitions, "%06d")


def run_memory(args: argparse.Namespace, workdir: str, guard: "MemoryGuard") -> dict[str, Any]:
    from spark_webdataset.storage import storage_for

    rows = max(1, args.memory_total_bytes // args.memory_sample_bytes)
    payload = rows * args.memory_sample_bytes
    print(
        f"\n== memory: {rows} x {args.memory_sample_bytes / MIB:.2f} MiB ({payload / MB:.0f} MB) in "
        f"{args.memory_partitions} partitions, maxShardBytes={args.memory_shard_bytes / MIB:.0f} MiB, "
        "local[2]",
        flush=True,
    )
    defaults: dict[str, str | None] = {}
    local_root = os.path.join(workdir, "memory")
    small = str(args.small_batch_bytes)
    # (label, format, target, conf overrides)
    plan: list[tuple[str, str, str, dict[str, str]]] = [
        ("noop (batches seen)", "bench_arrow_noop", "noop", {}),
        ("gcs", "webdataset", "gcs", {}),
        ("local", "webdataset", "local", {}),
        (f"local maxBytesPerBatch={small}", "webdataset", "local",
         {"spark.sql.execution.arrow.maxBytesPerBatch": small}),
        (f"noop maxBytesPerBatch={small}", "bench_arrow_noop", "noop",
         {"spark.sql.execution.arrow.maxBytesPerBatch": small}),
        ("local maxRecordsPerBatch=8", "webdataset", "local",
         {"spark.sql.execution.arrow.maxRecordsPerBatch": "8"}),
        ("local keycopy (diagnostic)", "webdataset_keycopy", "local", {}),
        ("gcs keycopy (diagnostic)", "webdataset_keycopy", "gcs", {}),
        (f"local keycopy maxBytesPerBatch={small}", "webdataset_keycopy", "local",
         {"spark.sql.execution.arrow.maxBytesPerBatch": small}),
        (f"gcs keycopy maxBytesPerBatch={small}", "webdataset_keycopy", "gcs",
         {"spark.sql.execution.arrow.maxBytesPerBatch": small}),
    ]  # fmt: skip
    if args.quick:
        plan = [p for p in plan if "maxRecords" not in p[0]]
    if args.memory_runs:
        wanted = args.memory_runs.split(",")
        unknown = sorted(set(wanted) - {p[0] for p in plan})
        if unknown:
            raise SystemExit(f"--memory-runs: no run labelled {unknown}; the runs are {[p[0] for p in plan]}")
        plan = [p for p in plan if p[0] in wanted]
    results = []
    for number, (label, fmt, target, overrides) in enumerate(plan):
        if target == "gcs":
            uri = f"gs://{BUCKET}/memory/run{number}"
        elif target == "local":
            uri = os.path.join(local_root, f"run{number}")
        else:
            uri = os.path.join(local_root, f"noop{number}.json")
            os.makedirs(local_root, exist_ok=True)
        spark = start_spark(args, workdir, overrides)
        guard.spark = spark
        if not defaults:
            defaults = arrow_confs(spark)
            print(f"   confs in effect: {defaults}", flush=True)
        in_effect = arrow_confs(spark)
        df = memory_frame(spark, rows, args.memory_sample_bytes, args.memory_partitions)
        os.sync()
        load_before = load()
        sampler = RssSampler(python_worker_role)
        try:
            with sampler:
                t0 = time.perf_counter()
                writer = df.write.format(fmt)
                if fmt != "bench_arrow_noop":
                    writer = writer.option("maxShardBytes", str(args.memory_shard_bytes)).mode("overwrite")
                else:
                    writer = writer.mode("append")
                writer.save(uri)
                elapsed = time.perf_counter() - t0
        finally:
            guard.spark = None
            spark.stop()
        entry: dict[str, Any] = {
            "label": label,
            "format": fmt,
            "target": target,
            "uri": uri,
            "conf_overrides": overrides,
            "confs_in_effect": in_effect,
            "seconds": elapsed,
            "payload_mb_s": payload / MB / elapsed,
            "peak_worker_rss_mib": round(sampler.peak_mib("worker"), 1),
            "rss_samples": sampler.samples,
            "processes": sampler.by_process(),
            "load_before": load_before,
            "load_after": load(),
        }
        if fmt == "bench_arrow_noop":
            with open(uri) as stream:
                entry["batches"] = json.load(stream)
            os.remove(uri)
        else:
            manifest = Version.at(uri).read_manifest()
            assert manifest is not None, f"{label}: no manifest at {uri}"
            samples = sum(s.samples for s in manifest.shards)
            assert samples == rows, f"{label}: {samples} samples written, expected {rows}"
            entry["shards"] = [{"name": s.name, "samples": s.samples, "bytes": s.bytes} for s in manifest.shards]
            entry["target_mib"] = MEMORY_TARGET_MIB
            entry["met"] = entry["peak_worker_rss_mib"] < MEMORY_TARGET_MIB
            storage_for(uri).delete_tree(uri)
        results.append(entry)
        extra = f"  batches {entry['batches']}" if "batches" in entry else f"  {len(entry['shards'])} shards"
        print(
            f"   {label:<34} {elapsed:6.1f} s {entry['payload_mb_s']:7.1f} MB/s  "
            f"peak worker RSS {entry['peak_worker_rss_mib']:7.1f} MiB{extra}  load {load_before}",
            flush=True,
        )
    shutil.rmtree(local_root, ignore_errors=True)
    return {
        "rows": rows,
        "sample_bytes": args.memory_sample_bytes,
        "partitions": args.memory_partitions,
        "payload_bytes": payload,
        "max_shard_bytes": args.memory_shard_bytes,
        "default_confs": defaults,
        "target_mib": MEMORY_TARGET_MIB,
        "runs": results,
    }


# -- main --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 repeats")
    parser.add_argument("--sizes", default=None, help="comma list of shard sizes (default 64MiB,512MiB)")
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (quick: 2)")
    parser.add_argument("--memory-total-bytes", type=parse_size, default=None, help="default 2.2GB")
    parser.add_argument("--memory-sample-bytes", type=parse_size, default=MIB)
    parser.add_argument("--memory-shard-bytes", type=parse_size, default=None, help="default 1GiB")
    parser.add_argument("--memory-partitions", type=int, default=2)
    parser.add_argument("--small-batch-bytes", type=parse_size, default=8 * MIB)
    parser.add_argument(
        "--emulator-memory-limit", default="2GiB",
        help="GOMEMLIMIT of the emulator for the Spark runs (default 2GiB)",
    )
    parser.add_argument(
        "--min-available-bytes", type=parse_size, default=int(1.5 * GIB),
        help="kill the emulator if the machine's available memory drops below this (default 1.5GiB)",
    )
    parser.add_argument("--skip-upload", action="store_true")
    parser.add_argument(
        "--memory-runs", default="",
        help="comma list of the memory part's run labels to do, e.g. 'noop (batches seen),gcs,local' (default all)",
    )
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--tmp", default="/tmp")
    parser.add_argument("--output", default=str(REPO / "bench" / "results" / "gcs_upload_throughput.json"))
    args = parser.parse_args(argv)
    sizes = args.sizes or ("8MiB,32MiB" if args.quick else "64MiB,512MiB")
    args.sizes = [parse_size(s) for s in sizes.split(",")]
    args.repeats = args.repeats or (2 if args.quick else 3)
    if args.memory_total_bytes is None:
        args.memory_total_bytes = 200 * MIB if args.quick else int(2.2e9)
    if args.memory_shard_bytes is None:
        args.memory_shard_bytes = 64 * MIB if args.quick else GIB
    return args


def print_report(results: dict[str, Any]) -> None:
    print("\n" + "=" * 96)
    upload = results.get("upload")
    if upload:
        print(f"upload throughput, best of {results['config']['repeats']}, MB/s (MB = 10^6 B)")
        names = list(upload["sizes"][0]["best_mb_s"])
        print(f"{'shard':>9} " + " ".join(f"{n:>21}" for n in names) + f" {'ours/upload_from_fn':>20}")
        for entry in upload["sizes"]:
            print(
                f"{entry['bytes'] / MIB:6.0f}MiB "
                + " ".join(f"{entry['best_mb_s'][n]:21.1f}" for n in names)
                + f" {entry['ratio_open_write_vs_upload_from_filename']:19.2f}x"
            )
    memory = results.get("memory")
    if memory:
        print(
            f"\nmemory: {memory['rows']} x {memory['sample_bytes'] / MIB:.2f} MiB, "
            f"{memory['partitions']} partitions, "
            f"maxShardBytes {memory['max_shard_bytes'] / MIB:.0f} MiB; target < {MEMORY_TARGET_MIB} MiB"
        )
        print(f"default confs: {memory['default_confs']}")
        for run in memory["runs"]:
            verdict = "" if "met" not in run else ("  met" if run["met"] else "  NOT met")
            print(
                f"  {run['label']:<34} {run['seconds']:6.1f} s {run['payload_mb_s']:7.1f} MB/s  "
                f"max worker RSS {run['peak_worker_rss_mib']:7.1f} MiB{verdict}"
            )
    print(f"load average: start {results['load_start']}, end {results['load_end']}")


class MemoryGuard:
    """Kills our emulator (and cancels Spark jobs) if the machine's available memory runs low.

    fake-gcs-server keeps every resumable upload in memory until it is finalized, so 1 GiB
    objects cost it gigabytes; other benchmarks share this machine.
    """

    def __init__(self, emulator: Any, min_available: int) -> None:
        self.emulator = emulator
        self.min_available = min_available
        self.spark: Any = None
        self.tripped: str | None = None
        self.lowest = psutil.virtual_memory().available
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            available = psutil.virtual_memory().available
            self.lowest = min(self.lowest, available)
            if available < self.min_available and not self.tripped:
                self.tripped = (
                    f"available memory {available / GIB:.2f} GiB < {self.min_available / GIB:.2f} GiB"
                )
                print(f"!! {self.tripped}: killing the emulator", flush=True)
                self.emulator.process.kill()
                if self.spark is not None:
                    self.spark.sparkContext.cancelAllJobs()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import pyspark

    workdir = tempfile.mkdtemp(prefix="bench-gcs-", dir=args.tmp)
    results: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items()},
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / GIB, 1),
            "python": platform.python_version(),
            "pyarrow": pa.__version__,
            "pyspark": pyspark.__version__,
        },
        "load_start": load(),
    }
    started = time.perf_counter()
    try:
        if not args.skip_upload:
            emulator = start_emulator(BUCKET)
            guard = MemoryGuard(emulator, args.min_available_bytes)
            try:
                results["upload"] = run_uploads(args, emulator, workdir)
            finally:
                guard.stop()
                stop_emulator(emulator)
            results["upload"]["lowest_available_gib"] = round(guard.lowest / GIB, 2)
            if guard.tripped:
                raise RuntimeError(guard.tripped)
        if not args.skip_memory:
            emulator = start_emulator(BUCKET, args.emulator_memory_limit)
            guard = MemoryGuard(emulator, args.min_available_bytes)
            try:
                results["memory"] = run_memory(args, workdir, guard)
            finally:
                guard.stop()
                stop_emulator(emulator)
            results["memory"]["emulator_gomemlimit"] = args.emulator_memory_limit
            results["memory"]["lowest_available_gib"] = round(guard.lowest / GIB, 2)
            if guard.tripped:
                raise RuntimeError(guard.tripped)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["load_end"] = load()
    results["seconds"] = time.perf_counter() - started
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as stream:
        json.dump(results, stream, indent=1)
    print_report(results)
    print(f"results: {args.output}")


if __name__ == "__main__":
    main()
