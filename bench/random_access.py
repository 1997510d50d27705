"""Random access to a committed version: `spark_webdataset.open(uri)[i]` against wids and a download.

    .venv/bin/python bench/random_access.py            # 3 shards of 64 MiB per sample size, local and gs://
    .venv/bin/python bench/random_access.py --quick    # 2 shards of 4 MiB
    .venv/bin/python bench/random_access.py --stores local --sizes 1024

Per sample size (--sizes: 1 KiB and 100 KiB) a version of --shards shards of about --shard-bytes
each is written with Spark (`local[--cores]`, one partition a shard, keys a hash of the row id so
key order is not shard order), validated and published (its wids shardindex.json), on local disk
and on fake-gcs-server (--stores). Spark is stopped before anything is timed. Then, per store and
size, two cases:

  random reads   --reads random positions a run, on a reader whose index is warm (every block cached):
                   ours 1 thread    r[i] in a loop                                               (ours)
                   ours 8 threads   the same reader shared by a ThreadPoolExecutor (--threads)
                   wids warm        ShardListDataset[i], every shard already downloaded and open:
                                    random reads from local mmapped tars, whatever the store
  first sample   a random position from nothing (a fresh reader, wids with an empty cache dir):
                   ours (version)   open(version dir)[i]: the manifest, the index footer, one index
                                    block, the sample                                           (ours)
                   ours (root)      open(dataset root)[i]: LATEST and its publish record first
                   wids cold        ShardListDataset(shardindex.json, cache_dir=empty)[i]: the index
                                    json, then the whole shard, indexed, before the sample (gs://
                                    through our Storage, as airflow/consumer.py hands it to wids)
                   shard download   one whole shard copied to a local file (shutil.copyfile; gs://
                                    the consumer's download handler): what any whole-shard reader pays

Requests and bytes are counted by wrapping the Storage backends' read methods (the outermost call
counts) and, for gs://, every HTTP request this process sends (requests' HTTPAdapter.send):
instrumentation only. The local store's page cache is warm (the shards were just written): local
figures are reads from memory, not from disk.

--profile adds cProfile's top functions of one 1-thread warm run a case to the notes.

Goals (issue 21 item 5): on the emulator one request per sample with a warm index; time to first
sample >= 10x below wids' cold start for 64 MiB shards; 1 KiB samples >= 5,000 random reads/s per
thread locally (judged on the 1-thread figure).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np  # noqa: E402
import psutil  # noqa: E402
from harness import MIB, Benchmark, Case, Contender, Ratio, emulator, main, measure, profiled, start_spark

BUCKET = "bench-random-access"
READS = ("read_range", "read_bytes", "read_versioned", "open_read", "exists", "list_sizes", "list_dirs")


# -- instrumentation ---------------------------------------------------------------


class Counter:
    """Calls into the Storage backends' read methods (the outermost only: read_bytes calling
    open_read is one) and the bytes they return; HTTP requests sent and their Content-Length."""

    def __init__(self) -> None:
        self.lock, self.depth = threading.Lock(), threading.local()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.calls = self.bytes = self.http = self.http_bytes = 0
            self.methods: dict[str, int] = {}

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {"storage_calls": self.calls, "storage_bytes": self.bytes, "http_requests": self.http,
                    "http_bytes": self.http_bytes, "storage_methods": dict(self.methods)}  # fmt: skip

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self.depth, "n", 0)
            self.depth.n = depth + 1
            try:
                value = original(*args, **kwargs)
            finally:
                self.depth.n = depth
            if depth == 0:
                data = value[0] if isinstance(value, tuple) else value
                size = len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0
                with self.lock:
                    self.calls, self.bytes = self.calls + 1, self.bytes + size
                    self.methods[original.__name__] = self.methods.get(original.__name__, 0) + 1
            return value

        return counted

    def install(self) -> None:
        from requests.adapters import HTTPAdapter

        from spark_webdataset.storage.gcs import GCSStorage
        from spark_webdataset.storage.local import LocalStorage

        for cls in (LocalStorage, GCSStorage):
            for name in READS:
                setattr(cls, name, self._wrap(getattr(cls, name)))
        send = HTTPAdapter.send

        def counted_send(adapter: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            response = send(adapter, request, *args, **kwargs)
            with self.lock:
                self.http += 1
                self.http_bytes += int(response.headers.get("Content-Length") or 0)
            return response

        HTTPAdapter.send = counted_send  # type: ignore[method-assign]


COUNTER = Counter()


def per_sample(reads: int, gcs: bool) -> Callable[[Any], dict[str, Any]]:
    """A contender's check: requests and bytes per sample read (HTTP on gs://, Storage calls locally)."""

    def check(_: Any) -> dict[str, Any]:
        seen = COUNTER.snapshot()
        requests, data = (
            (seen["http_requests"], seen["http_bytes"]) if gcs else (seen["storage_calls"], seen["storage_bytes"])
        )
        return {**seen, "requests_per_sample": round(requests / reads, 3), "bytes_per_sample": round(data / reads, 1)}

    return check


# -- the data -----------------------------------------------------------------------


def tar_bytes(sample_bytes: int) -> int:
    """One sample's bytes in a shard: a header and the payload padded to 512 (one field, `bin`)."""
    return 512 + -(-sample_bytes // 512) * 512


def write_version(spark: Any, root: str, sample_bytes: int, shards: int, shard_bytes: int) -> dict[str, Any]:
    """root/versions/v1: `shards` partitions of just under `shard_bytes` each (one shard apiece),
    keys the first 20 hex digits of sha256(id), payloads made in the JVM; validated and published."""
    from spark_webdataset.dataset.layout import Version
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    per_partition = max(1, int(shard_bytes * 0.97) // tar_bytes(sample_bytes))
    rows = per_partition * shards
    frame = spark.range(rows, numPartitions=shards).selectExpr(
        "substr(sha2(CAST(id AS STRING), 256), 1, 20) AS __key__",
        f"CAST(substr(repeat(sha2(CAST(id * 7 AS STRING), 256), {-(-sample_bytes // 64)}), 1, {sample_bytes}) AS BINARY) AS bin",
    )  # fmt: skip
    version = f"{root}/versions/v1"
    started = time.perf_counter()
    frame.write.format("webdataset").mode("overwrite").option("maxShardBytes", str(shard_bytes)).save(version)
    written = time.perf_counter() - started
    report = validate_version(version)
    assert report.ok, report.summary()
    publish(root, "v1")
    manifest = Version.at(version).read_manifest()
    assert manifest is not None and manifest.samples == rows, (manifest, rows)
    return {
        "root": root, "version": version, "index_uri": Version.at(version).index_uri, "samples": rows,
        "shards": len(manifest.shards), "data_bytes": manifest.bytes, "index_bytes": manifest.sample_index_bytes,
        "index_fraction": manifest.sample_index_bytes / manifest.bytes, "shard_sizes": [s.bytes for s in manifest.shards],
        "write_s": round(written, 2),
    }  # fmt: skip


# -- the contenders -------------------------------------------------------------------


def quiet_wids(make: Callable[[], Any]) -> Any:
    """wids prints a line to stderr whenever a ShardListDataset is made."""
    with contextlib.redirect_stderr(io.StringIO()):
        return make()


def wids_dataset(index_uri: str, cache_dir: str) -> Any:
    from spark_webdataset.airflow.consumer import wids_through_storage

    wids = wids_through_storage()  # gs:// downloads through our Storage (no gsutil here)
    return quiet_wids(lambda: wids.ShardListDataset(index_uri, cache_dir=cache_dir, transformations=[], lru_size=64))


def random_cases(store: str, data: dict[str, Any], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Warm random reads: ours 1 and N threads on one shared reader, wids with every shard local."""
    import spark_webdataset

    gcs, reads, rng = store == "gcs", args.gcs_reads if store == "gcs" else args.reads, np.random.default_rng(21)
    reader = spark_webdataset.open(data["version"])
    list(reader.keys())  # every index block into the cache: the index is warm
    wids = wids_dataset(data["index_uri"], str(work / f"wids-warm-{store}-{data['sample_bytes']}"))
    starts = np.cumsum([0, *wids.lengths])
    for first in starts[:-1]:
        sample = wids[int(first)]  # every shard downloaded, indexed and open
        assert sample[".bin"].getvalue() == reader.get(sample["__key__"])["bin"]  # the same bytes both ways
    positions: list[np.ndarray] = []

    def prepare() -> None:
        positions[:] = [rng.integers(0, len(reader), reads)]
        COUNTER.reset()

    def ours_one() -> None:
        for position in positions[0].tolist():
            assert len(reader[position]["bin"]) == data["sample_bytes"]

    pool = ThreadPoolExecutor(args.threads)

    def ours_many() -> None:
        def part(chunk: np.ndarray) -> None:
            for position in chunk.tolist():
                assert len(reader[position]["bin"]) == data["sample_bytes"]

        list(pool.map(part, np.array_split(positions[0], args.threads)))

    def wids_warm() -> None:
        for position in positions[0].tolist():
            assert wids[position][".bin"].getbuffer().nbytes == data["sample_bytes"]  # wids: a BytesIO a field

    check = per_sample(reads, gcs)
    contenders = {
        "ours 1 thread": Contender(ours_one, reads, prepare, check),
        f"ours {args.threads} threads": Contender(ours_many, reads, prepare, check),
        "wids warm (all local)": Contender(wids_warm, reads, prepare, check),
    }
    ratios = [Ratio(f"ours {args.threads} threads", "ours 1 thread"), Ratio("ours 1 thread", "wids warm (all local)")]
    info = {"store": store, "sample_bytes": data["sample_bytes"], "reads": reads, "samples": data["samples"],
            "shards": data["shards"]}  # fmt: skip
    name = f"random reads {store} {data['sample_bytes'] // 1024} KiB"
    try:
        if args.profile:
            prepare()
            info["profile_1_thread"] = profiled(ours_one, top=12)
        return measure(Case(name, contenders, ratios, unit="samples", scale=1, info=info), args)
    finally:
        pool.shutdown()
        wids.close()


def first_sample_cases(store: str, data: dict[str, Any], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Time to the first sample from nothing: ours fresh, wids with an empty cache, a shard download."""
    import spark_webdataset
    from spark_webdataset.airflow.consumer import _download_through_storage
    from spark_webdataset.storage import storage_for

    gcs, rng, count = store == "gcs", np.random.default_rng(5), iter(range(10**9))
    storage = storage_for(data["version"])
    shard_names = [storage.join(data["version"], name) for name in sorted(data["shard_names"])]
    state: dict[str, Any] = {}

    def prepare() -> None:
        state["position"] = int(rng.integers(0, data["samples"]))
        for old in work.glob(f"wids-cold-{store}-*"):
            shutil.rmtree(old, ignore_errors=True)
        state["cache"] = str(work / f"wids-cold-{store}-{next(count)}")
        state["shard"] = shard_names[int(rng.integers(0, len(shard_names)))]
        state["copy"] = str(work / "shard-copy.tar")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(state["copy"])
        COUNTER.reset()

    def ours(uri: str) -> Callable[[], Any]:
        def run() -> dict[str, Any]:
            sample = spark_webdataset.open(uri)[state["position"]]
            assert len(sample["bin"]) == data["sample_bytes"]
            return {"key": sample["__key__"]}

        return run

    def wids_cold() -> dict[str, Any]:
        dataset = wids_dataset(data["index_uri"], state["cache"])
        try:
            sample = dataset[state["position"]]
            assert sample[".bin"].getbuffer().nbytes == data["sample_bytes"]
            return {"key": sample["__key__"], "shard": sample["__shard__"]}
        finally:
            dataset.close()

    def download() -> None:
        if gcs:
            _download_through_storage(state["shard"], state["copy"])
        else:
            shutil.copyfile(state["shard"], state["copy"])

    def counted(_: Any) -> dict[str, Any]:
        seen = COUNTER.snapshot()
        # what a whole-shard reader copies locally (shutil.copyfile is not a Storage call)
        copied = (
            sum(p.stat().st_size for p in Path(state["cache"]).glob("*.tar")) if os.path.isdir(state["cache"]) else 0
        )
        copied += os.path.getsize(state["copy"]) if os.path.exists(state["copy"]) else 0
        return {**seen, "requests": seen["http_requests"] if gcs else seen["storage_calls"],
                "bytes": seen["http_bytes"] if gcs else seen["storage_bytes"] or copied, "copied_bytes": copied}  # fmt: skip

    contenders = {
        "ours (version)": Contender(ours(data["version"]), 1, prepare, counted),
        "ours (root)": Contender(ours(data["root"]), 1, prepare, counted),
        "wids cold": Contender(wids_cold, 1, prepare, counted),
        "shard download": Contender(download, 1, prepare, counted),
    }
    ratios = [Ratio("ours (version)", "wids cold", target=10.0), Ratio("ours (version)", "shard download")]
    info = {
        "store": store,
        "sample_bytes": data["sample_bytes"],
        "shard_mib": round(float(np.mean(data["shard_sizes"])) / MIB, 1),
    }
    name = f"first sample {store} {data['sample_bytes'] // 1024} KiB"
    return measure(Case(name, contenders, ratios, unit="samples", scale=1, info=info), args)


# -- the benchmark --------------------------------------------------------------------------


def flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--sizes", type=int, nargs="+", default=[1024, 100 * 1024], help="sample payload bytes")
    add("--shards", type=int, default=3, help="shards per version (one Spark partition each)")
    add("--shard-bytes", default="64MiB", help="maxShardBytes; each partition writes just under it")
    add("--stores", default="local,gcs", help="local, gcs (fake-gcs-server), or both")
    add("--reads", type=int, default=20000, help="random reads a warm run, local")
    add("--gcs-reads", type=int, default=1000, help="random reads a warm run, gs://")
    add("--threads", type=int, default=8)
    add("--cores", type=int, default=2, help="local[N] for the writes")
    add("--profile", action="store_true", help="profile one 1-thread warm run a case (cProfile; in the notes)")


def quick(args: argparse.Namespace) -> None:
    args.shards, args.shard_bytes, args.reads, args.gcs_reads, args.repeats, args.warmup = 2, "4MiB", 2000, 200, 1, 1


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    from harness import parse_size

    work, stores = Path(workdir), [s for s in args.stores.split(",") if s]
    shard_bytes = parse_size(args.shard_bytes)
    versions: dict[tuple[str, int], dict[str, Any]] = {}
    cases: list[dict[str, Any]] = []
    with emulator(BUCKET) if "gcs" in stores else contextlib.nullcontext() as server:
        spark = start_spark(args.cores, str(work / "spark-local"))
        try:
            for store in stores:
                for size in args.sizes:
                    root = f"gs://{BUCKET}/ra-{size}" if store == "gcs" else str(work / f"ra-{size}")
                    data = write_version(spark, root, size, args.shards, shard_bytes)
                    data["sample_bytes"] = size
                    versions[(store, size)] = data
                    print(f"wrote {store} {size} B: {data['samples']} samples in {data['shards']} shards of "
                          f"{np.mean(data['shard_sizes']) / MIB:.1f} MiB in {data['write_s']} s; index "
                          f"{data['index_bytes']:,} B = {data['index_fraction']:.3%} of the data", flush=True)  # fmt: skip
        finally:
            spark.stop()  # nothing of Spark runs while we time
        from spark_webdataset.dataset.layout import Version

        for data in versions.values():
            data["shard_names"] = [s.name for s in Version.at(data["version"]).read_manifest().shards]
        COUNTER.install()
        emulator_process = psutil.Process(server.process.pid) if server else None
        for (store, _size), data in versions.items():
            cpu0 = sum(emulator_process.cpu_times()[:2]) if emulator_process and store == "gcs" else None
            cases.append(random_cases(store, data, args, work))
            cases.append(first_sample_cases(store, data, args, work))
            if cpu0 is not None:
                data["emulator_cpu_s"] = round(sum(emulator_process.cpu_times()[:2]) - cpu0, 2)
    return {"cases": cases, "versions": {f"{s} {b}": d for (s, b), d in versions.items()},
            "notes": notes(cases, versions, args)}  # fmt: skip


def _best(case: dict[str, Any], contender: str) -> dict[str, Any]:
    summary = case["contenders"][contender]
    return min((r for r in summary["runs"] if not r["warmup"]), key=lambda r: r["seconds"])


def notes(
    cases: list[dict[str, Any]], versions: dict[tuple[str, int], dict[str, Any]], args: argparse.Namespace
) -> list[str]:
    lines = ["", "per store and size (best clean run of each contender):"]
    by_name = {c["case"]: c for c in cases}
    goals = []
    for (store, size), data in versions.items():
        kib = size // 1024
        reads, first = by_name[f"random reads {store} {kib} KiB"], by_name[f"first sample {store} {kib} KiB"]
        one, many, wids = (
            reads["contenders"][n]["rate"]
            for n in ("ours 1 thread", f"ours {args.threads} threads", "wids warm (all local)")
        )
        warm = _best(reads, "ours 1 thread")
        ttfs = {n: first["contenders"][n]["best_s"] for n in first["contenders"]}
        cold = {n: _best(first, n) for n in first["contenders"]}
        lines.append(
            f"  {store} {kib} KiB ({data['samples']:,} samples, {data['shards']} x {np.mean(data['shard_sizes']) / MIB:.1f} MiB; "
            f"index {data['index_bytes']:,} B = {data['index_fraction']:.3%} of {data['data_bytes'] / MIB:.0f} MiB):"
        )
        lines.append(
            f"    warm random r[i]: 1 thread {one:,.0f}/s, {args.threads} threads {many:,.0f}/s, wids warm {wids:,.0f}/s; "
            f"{warm['requests_per_sample']} requests and {warm['bytes_per_sample']:,.0f} B a sample"
        )
        lines.append(
            "    first sample: " + ", ".join(f"{n} {1000 * s:.1f} ms ({cold[n]['requests']} requests, {cold[n]['bytes']:,} B)"
                                               for n, s in ttfs.items())
        )  # fmt: skip
        if store == "gcs":
            goals.append(f"  gs:// {kib} KiB: {warm['requests_per_sample']} requests a warm sample (target 1): "
                         f"{'met' if warm['requests_per_sample'] <= 1.0 else 'NOT met'}")  # fmt: skip
        speedup = ttfs["wids cold"] / ttfs["ours (version)"]
        goals.append(f"  {store} {kib} KiB: first sample {speedup:.0f}x below wids' cold start (target 10x, "
                     f"{np.mean(data['shard_sizes']) / MIB:.0f} MiB shards): {'met' if speedup >= 10 else 'NOT met'}")  # fmt: skip
        if store == "local" and size <= 1024:
            goals.append(f"  local {kib} KiB: {one:,.0f} random reads/s on 1 thread (target >= 5,000): "
                         f"{'met' if one >= 5000 else 'NOT met'}")  # fmt: skip
        for entry in reads.get("profile_1_thread", []):
            lines.append(
                f"      profile: {entry['tottime_s'] * 1e6 / reads['reads']:6.1f} us/read own time  {entry['function']}"
            )
        if "emulator_cpu_s" in data:
            lines.append(f"    the emulator used {data['emulator_cpu_s']} CPU s over both cases")
    return [*lines, "goals:", *goals]


BENCH = Benchmark("random_access", __doc__, run, flags, quick, defaults={"repeats": 3, "warmup": 1})

if __name__ == "__main__":
    main(BENCH)
