"""Shard upload throughput to the GCS emulator and the S3 server, and a writer task's peak RSS with 1 GiB shards.

    .venv/bin/python bench/gcs_upload_throughput.py            # full size (~25 minutes: the emulator is slow)
    .venv/bin/python bench/gcs_upload_throughput.py --skip-upload --memory-runs 'noop (batches seen),gcs,local'
    .venv/bin/python bench/gcs_upload_throughput.py --quick
    .venv/bin/python bench/gcs_upload_throughput.py --quick --skip-memory --no-gcs   # s3:// uploads only

fake-gcs-server (tests/support/gcs_emulator.py) is started before any SparkSession, so
Spark's Python workers inherit STORAGE_EMULATOR_HOST. Upload, per shard size, side by side:

  open_write            storage_for("gs://...").open_write(path), the file written in 1 MiB pieces
                        (what a task's ShardWriter does)                                      (ours)
  upload_from_filename  google-cloud-storage's blob.upload_from_filename(file)            (baseline)
  open_write_100MiB     diagnostic: open_write's BlobWriter with upload_from_filename's chunk size
  local_file            reference: LocalStorage.open_write, the same 1 MiB writes, fsynced

On s3:// (moto_server, tests/support/s3_server.py, after the gs:// cases), side by side:

  open_write            storage_for("s3://...").open_write(path), 1 MiB pieces: multipart, 8 MiB parts (ours)
  put_object            one PutObject of the whole file through the same signed client  (baseline: no
                        boto3 here, docs/s3.md; what a simple uploader does, the body in memory)
  local_file            reference, as above

Every upload is read back (size, crc32c); the emulator's CPU and peak RSS per upload are recorded
(it re-hashes the whole object on every chunk: its CPU, not ours, is most of the cost). Memory:
a fresh local[2] session per run writes --memory-total-bytes of 1 MiB samples (made in the JVM)
into 1 GiB shards while the Python workers' RSS is sampled (target < 300 MiB); runs vary the
target (gs://, local, a no-op writer) and the Arrow batch confs. A guard kills the emulator if the
machine's available memory drops below --min-available-bytes.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import threading
from collections.abc import Callable
from typing import Any

import psutil  # noqa: E402
from harness import (
    GIB,
    MIB,
    Benchmark,
    Case,
    Contender,
    NoopDataSource,
    Ratio,
    RssSampler,
    arrow_confs,
    emulator,
    main,
    measure,
    parse_size,
    peak_rss_run,
    sha_frame,
    start_spark,
)  # fmt: skip

PIECE = MIB  # what a task's ShardWriter hands the stream per 1 MiB sample
MEMORY_TARGET_MIB = 300
BUCKET = "bench-upload"


def flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--sizes", default="64MiB,512MiB", help="comma list of shard sizes")
    add("--memory-total-bytes", type=parse_size, default=int(2.2e9))
    add("--memory-sample-bytes", type=parse_size, default=MIB)
    add("--memory-shard-bytes", type=parse_size, default=GIB)
    add("--memory-partitions", type=int, default=2)
    add("--small-batch-bytes", type=parse_size, default=8 * MIB)
    add("--emulator-memory-limit", default="2GiB", help="the emulator's GOMEMLIMIT in the memory part")
    add("--min-available-bytes", type=parse_size, default=int(1.5 * GIB), help="kill the emulator below this")
    add("--skip-upload", action="store_true")
    add("--no-gcs", action="store_true", help="no gs:// upload cases")
    add("--no-s3", action="store_true", help="no s3:// upload cases")
    add("--memory-runs", default="", help="comma list of memory run labels, e.g. 'noop (batches seen),gcs,local'")
    add("--skip-memory", action="store_true")


def quick(args: argparse.Namespace) -> None:
    args.sizes, args.repeats, args.warmup = "8MiB", 1, 0
    args.memory_total_bytes, args.memory_shard_bytes = 64 * MIB, 32 * MIB
    args.memory_runs = args.memory_runs or "noop (batches seen),gcs,local"


class MemoryGuard(threading.Thread):
    """Kills our emulator (and cancels Spark's jobs) if the machine's available memory runs low:
    fake-gcs-server keeps every resumable upload in memory, and other benchmarks share the machine."""

    def __init__(self, server: Any, minimum: int) -> None:
        super().__init__(daemon=True)
        self.server, self.minimum, self.spark, self.tripped = server, minimum, None, ""
        self.lowest = psutil.virtual_memory().available
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.wait(0.25):
            self.lowest = min(self.lowest, psutil.virtual_memory().available)
            if self.lowest < self.minimum and not self.tripped:
                self.tripped = f"available memory {self.lowest / GIB:.2f} GiB < {self.minimum / GIB:.2f} GiB"
                print(f"!! {self.tripped}: killing the emulator", flush=True)
                self.server.process.kill()
                if self.spark is not None:
                    self.spark.sparkContext.cancelAllJobs()

    def stop(self) -> dict[str, Any]:
        self.done.set()
        self.join()
        if self.tripped:
            raise RuntimeError(self.tripped)
        return {"lowest_available_gib": round(self.lowest / GIB, 2)}


def make_file(path: str, size: int) -> str:
    """`size` random bytes at `path`; their crc32c as GCS reports it (base64)."""
    import google_crc32c

    checksum = google_crc32c.Checksum()
    with open(path, "wb") as stream:
        for start in range(0, size, 16 * MIB):
            piece = os.urandom(min(16 * MIB, size - start))
            checksum.update(piece)
            stream.write(piece)
    return base64.b64encode(checksum.digest()).decode()


def stream_file(path: str, sink: Any) -> None:
    buffer = bytearray(PIECE)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as source:
        while count := source.readinto(buffer):
            sink.write(view[:count])


def uploaders(local: str) -> dict[str, Callable[[str], str | None]]:
    """name -> fn(object name) -> the gs:// URI written (None: not in GCS)."""
    from spark_webdataset.storage import storage_for
    from spark_webdataset.storage.gcs import _retry, client

    def open_write(name: str) -> str:
        with storage_for(f"gs://{BUCKET}/{name}").open_write(f"gs://{BUCKET}/{name}") as stream:
            stream_file(local, stream)
        return name

    def upload_from_filename(name: str) -> str:
        client().bucket(BUCKET).blob(name).upload_from_filename(local)
        return name

    def open_write_100mib(name: str) -> str:
        blob = client().bucket(BUCKET).blob(name)
        blob.chunk_size = 100 * MIB
        with blob.open("wb", ignore_flush=True, retry=_retry()) as stream:
            stream_file(local, stream)
        return name

    def local_file(name: str) -> None:
        with storage_for(local + ".copy").open_write(local + ".copy") as stream:
            stream_file(local, stream)
            stream.flush()
            os.fsync(stream.fileno())  # the emulator's filesystem backend does not fsync
        os.remove(local + ".copy")

    return {"open_write": open_write, "upload_from_filename": upload_from_filename,
            "open_write_100MiB": open_write_100mib, "local_file": local_file}  # fmt: skip


def upload_case(args: argparse.Namespace, workdir: str, server: Any, size: int) -> Case:
    from spark_webdataset.storage.gcs import client

    local = os.path.join(workdir, f"shard-{size // MIB}MiB.tar")
    crc = make_file(local, size)
    emulator_process, me = psutil.Process(server.process.pid), psutil.Process()
    runs = iter(range(10**9))

    def timed(fn: Callable[[str], str | None]) -> Callable[[], dict[str, Any]]:
        def upload() -> dict[str, Any]:
            rss = RssSampler(lambda p: "emulator", candidates=lambda: [emulator_process])
            client0, emulator0 = sum(me.cpu_times()[:2]), sum(emulator_process.cpu_times()[:2])
            with rss:
                name = fn(f"{size // MIB}MiB-{next(runs)}.tar")
            return {"object": name, "client_cpu_s": round(sum(me.cpu_times()[:2]) - client0, 3),
                    "emulator_cpu_s": round(sum(emulator_process.cpu_times()[:2]) - emulator0, 3),
                    "emulator_peak_rss_mib": rss.peak_mib("emulator")}  # fmt: skip

        return upload

    def check(record: dict[str, Any]) -> None:
        if record["object"]:
            blob = client().bucket(BUCKET).get_blob(record["object"])
            assert blob is not None and blob.size == size and blob.crc32c == crc, (record["object"], blob)
            blob.delete()

    contenders = {name: Contender(timed(fn), size, check=check) for name, fn in uploaders(local).items()}
    return Case(f"upload {size // MIB} MiB", contenders, [Ratio("open_write", "upload_from_filename")])


def s3_uploaders(local: str, bucket: str) -> dict[str, Callable[[str], str | None]]:
    """name -> fn(object name) -> the key written in `bucket` (None: not in S3)."""
    from spark_webdataset.storage import storage_for
    from spark_webdataset.storage.s3 import client, crc32c_text

    def open_write(name: str) -> str:
        with storage_for(f"s3://{bucket}/{name}").open_write(f"s3://{bucket}/{name}") as stream:
            stream_file(local, stream)
        return name

    def put_object(name: str) -> str:
        import google_crc32c

        with open(local, "rb") as source:
            data = source.read()
        headers = {
            "x-amz-sdk-checksum-algorithm": "CRC32C",
            "x-amz-checksum-crc32c": crc32c_text(google_crc32c.value(data)),
        }
        response = client().request("PUT", bucket, name, headers=headers, body=data)
        assert response.status == 200, (name, response.status, response.body[:200])
        return name

    local_file = uploaders(local)["local_file"]
    return {"open_write": open_write, "put_object": put_object, "local_file": local_file}


def s3_upload_case(args: argparse.Namespace, workdir: str, server: Any, size: int, bucket: str) -> Case:
    from spark_webdataset.storage.s3 import client

    local = os.path.join(workdir, f"s3-shard-{size // MIB}MiB.tar")
    crc = make_file(local, size)
    server_process, me = psutil.Process(server.process.pid), psutil.Process()
    runs = iter(range(10**9))

    def timed(fn: Callable[[str], str | None]) -> Callable[[], dict[str, Any]]:
        def upload() -> dict[str, Any]:
            rss = RssSampler(lambda p: "server", candidates=lambda: [server_process])
            client0, server0 = sum(me.cpu_times()[:2]), sum(server_process.cpu_times()[:2])
            with rss:
                name = fn(f"{size // MIB}MiB-{next(runs)}.tar")
            return {"object": name, "client_cpu_s": round(sum(me.cpu_times()[:2]) - client0, 3),
                    "server_cpu_s": round(sum(server_process.cpu_times()[:2]) - server0, 3),
                    "server_peak_rss_mib": rss.peak_mib("server")}  # fmt: skip

        return upload

    def check(record: dict[str, Any]) -> None:
        if record["object"]:
            head = client().request("HEAD", bucket, record["object"], headers={"x-amz-checksum-mode": "ENABLED"})
            found = (
                head.status,
                int(head.headers.get("content-length", -1)),
                head.headers.get("x-amz-checksum-crc32c"),
            )
            assert found == (200, size, crc), (record["object"], found)
            client().request("DELETE", bucket, record["object"])

    contenders = {name: Contender(timed(fn), size, check=check) for name, fn in s3_uploaders(local, bucket).items()}
    return Case(f"s3 upload {size // MIB} MiB", contenders, [Ratio("open_write", "put_object")])


def memory_runs(args: argparse.Namespace, workdir: str, guard: MemoryGuard) -> dict[str, Any]:
    """One fresh local[2] session a run (fresh workers: each peak is its own)."""
    from spark_webdataset.dataset.layout import Version
    from spark_webdataset.storage import storage_for

    rows = max(1, args.memory_total_bytes // args.memory_sample_bytes)
    small = {"spark.sql.execution.arrow.maxBytesPerBatch": str(args.small_batch_bytes)}
    plan: list[tuple[str, str, dict[str, str]]] = [  # (label, target, conf overrides)
        ("noop (batches seen)", "noop", {}), ("gcs", "gcs", {}), ("local", "local", {}),
        (f"local maxBytesPerBatch={args.small_batch_bytes}", "local", small),
        (f"noop maxBytesPerBatch={args.small_batch_bytes}", "noop", small),
        (f"gcs maxBytesPerBatch={args.small_batch_bytes}", "gcs", small),
        ("local maxRecordsPerBatch=8", "local", {"spark.sql.execution.arrow.maxRecordsPerBatch": "8"}),
    ]  # fmt: skip
    if args.memory_runs:
        wanted = args.memory_runs.split(",")
        if unknown := sorted(set(wanted) - {p[0] for p in plan}):
            raise SystemExit(f"--memory-runs: no run labelled {unknown}; the runs are {[p[0] for p in plan]}")
        plan = [p for p in plan if p[0] in wanted]
    results, notes = [], []
    for number, (label, target, overrides) in enumerate(plan):
        uri = {"gcs": f"gs://{BUCKET}/memory/run{number}", "local": os.path.join(workdir, f"run{number}"),
               "noop": os.path.join(workdir, f"noop{number}.json")}[target]  # fmt: skip
        spark = guard.spark = start_spark(2, workdir, "2g", overrides, [NoopDataSource])
        try:
            writer = sha_frame(spark, rows, args.memory_sample_bytes, args.memory_partitions, "%06d").write
            if target == "noop":
                writer = writer.format("bench_arrow_noop").mode("append")
            else:
                writer = (
                    writer.format("webdataset").option("maxShardBytes", str(args.memory_shard_bytes)).mode("overwrite")
                )
            os.sync()
            entry = {"label": label, "uri": uri, "confs": arrow_confs(spark), **peak_rss_run(lambda: writer.save(uri))}
        finally:
            guard.spark = None
            spark.stop()
        if target == "noop":
            entry["batches"] = json.loads(open(uri).read())
            os.remove(uri)
        else:
            manifest = Version.at(uri).read_manifest()
            assert manifest is not None and manifest.samples == rows, f"{label}: wrong samples at {uri}"
            entry.update(shards=len(manifest.shards), met=entry["peak_worker_rss_mib"] < MEMORY_TARGET_MIB)
            storage_for(uri).delete_tree(uri)
        results.append(entry)
        verdict = (
            "" if "met" not in entry else f" (target < {MEMORY_TARGET_MIB}: {'met' if entry['met'] else 'NOT met'})"
        )
        notes.append(f"memory {label:<34} {entry['seconds']:6.1f} s, {rows * args.memory_sample_bytes / 1e6 / entry['seconds']:6.1f}"
                     f" MB/s, peak worker RSS {entry['peak_worker_rss_mib']:6.1f} MiB{verdict}"
                     + (f", batches {entry['batches']}" if "batches" in entry else ""))  # fmt: skip
        print(notes[-1], flush=True)
    return {"rows": rows, "sample_bytes": args.memory_sample_bytes, "max_shard_bytes": args.memory_shard_bytes,
            "target_mib": MEMORY_TARGET_MIB, "runs": results, "notes": notes}  # fmt: skip


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    results: dict[str, Any] = {"cases": [], "notes": []}
    if not args.skip_upload and not args.no_gcs:
        with emulator(BUCKET) as server:
            guard = MemoryGuard(server, args.min_available_bytes)
            try:
                results["cases"] = [
                    measure(upload_case(args, workdir, server, parse_size(s)), args) for s in args.sizes.split(",")
                ]
            finally:
                results["upload_guard"] = guard.stop()
    if not args.skip_upload and not args.no_s3:
        from commit_scaling import s3_server  # the S3 server's context (beside harness.emulator)

        with s3_server(BUCKET) as server:
            results["cases"] += [measure(s3_upload_case(args, workdir, server, parse_size(s), BUCKET), args)
                                 for s in args.sizes.split(",")]  # fmt: skip
    if not args.skip_memory:
        with emulator(BUCKET, args.emulator_memory_limit) as server:
            guard = MemoryGuard(server, args.min_available_bytes)
            try:
                results["memory"] = memory_runs(args, workdir, guard)
            finally:
                results["memory_guard"] = guard.stop()
        results["notes"] = results["memory"].pop("notes")
    return results


BENCH = Benchmark("gcs_upload_throughput", __doc__, run, flags, quick, defaults={"repeats": 3, "warmup": 0})

if __name__ == "__main__":
    main(BENCH)
