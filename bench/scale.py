"""The driver's metadata operations at 10k and 100k shards: what grows with the dataset, not the change.

    .venv/bin/python bench/scale.py             # 10k and 100k shards of 10M keys; chains; fake-gcs-server at 10k
    .venv/bin/python bench/scale.py --quick     # 500 and 2,000 shards of 200k keys; small chains; emulator 200
    .venv/bin/python bench/scale.py --no-gcs --shards 10000 --keys 10000000
    .venv/bin/python bench/scale.py --only sizes --shards 10000 100000 --shards-per-task 10   # bench/README's run

With one shard a task (the default) at 100k shards the base commit opens 100k task runs at once and
fails on a 20,000-descriptor limit: a finding, recorded as the step's error (the size then ends);
--shards-per-task 10 measures the rest.

Per dataset size (--shards N shards, --keys K keys in all), on one root, each step timed alone:

  commit base      N staged task attempts (one tiny real shard each: one sample written by the
                   package's ShardWriter, so sizes and crc32c are what the commit checks; its sample
                   index run lists K/N keys, all located at that one sample: synthetic rows, real
                   bytes) made final by dataset.commit.commit_job, with its merge and rename phases.
  publish base     dataset.publish.publish. Validation is not run on the base (its index rows are
                   synthetic): a report is written for it from the manifest and the listing's
                   identities, as validation writes one (untimed), so that publish and a child's
                   validation have what they read.
  child commit     a version on the base with one task of 1,000 real new samples (change append):
                   the daily job's commit, of a change that is constant while the dataset grows;
                   its keys after every base key, or with --child-keys spread among them.
  validate child   validate_version of that child (its shard opened; the N referenced shards proven
                   by identity against the base's report; its sample index proven from the change
                   over the base's validated index: dataset/index_proof.py).
  publish child    publish of the child.
  open + get       spark_webdataset.open(ROOT) (LATEST, record, manifest, index footer) and one get(key)
                   of the child's own sample, then one of a referenced sample (warm reader).
  inspect          catalog.describe_root(ROOT) (what `spark-webdataset inspect ROOT` prints).

Chains (--chains VxN): V published versions of N shards each, every child referencing the first's
N shards plus one shard of its own (manifests, validation reports and sample index files written
directly, shard and index files hard links of one file: untimed; each publish is timed and the
mean reported), then inspect, a gc plan (`gc --dry-run`), retention.collect(keep_last 3, min_age 0) and collect once
more (the next day's gc, with nothing new to retire).

Index bytes (--index-keys): the sample index's bytes a key for realistic rows (16-hex-digit keys,
~10 kB samples over 3,600 shards of 3 GiB, hash order and key order), which the synthetic rows
above (one location a shard) do not show: they compress to ~1 B a key.

Merge (--merge-keys): format.keys merge_blocks + first_duplicate_in_blocks over 100 in-memory
sorted runs (as bench/commit_scaling.py), the merge alone without the index's parquet write.

The size steps also run on fake-gcs-server (--gcs-shards, --gcs-keys) and, if asked, on the S3
server (moto_server, --s3-shards, --s3-keys; `--quick` runs 100 shards).

For every step: wall seconds, CPU seconds of this process (and children), Storage calls by method
(the outermost call: a `read_bytes` calling `open_read` is one; listings also count the entries
they returned, so a GCS/S3 listing's pages are ceil(entries / 1000)), on gs:// and s3:// also the
HTTP requests by kind and price class, and this process's peak RSS above its RSS when the step began (sampled every
20 ms, after a malloc_trim). The notes print each step at the two sizes, the ratio of their costs
against the ratio of the sizes, and the slope (seconds a shard, a key).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from harness import (
    MIB,
    Benchmark,
    Case,
    Contender,
    RssSampler,
    commit_phases_timed,
    emulator,
    main,
    measure,
    print_table,
)

BUCKET = "bench-scale"
CHILD_SAMPLES = 1000
PAYLOAD = b"x" * 100
STORAGE_METHODS = (
    "open_write", "open_read", "exists", "list_sizes", "list_dirs", "delete", "delete_tree", "rename_new",
    "same_object", "identities", "delete_if_identity", "write_atomic", "create_only", "read_versioned",
    "replace_if", "delete_if", "newest_modification", "remove_empty_dir", "crc32c_below", "objects",
    "read_bytes", "read_range",
)  # fmt: skip
LISTINGS = ("list_sizes", "list_dirs", "identities", "crc32c_below", "objects")


# -- counting requests ----------------------------------------------------------------


class Requests:
    """Calls into the Storage backends (outermost only, per thread) by method, the entries listings
    returned, and on gs:// the HTTP requests sent, by kind (instrumentation only)."""

    def __init__(self) -> None:
        self.lock, self.depth = threading.Lock(), threading.local()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.calls: dict[str, int] = {}
            self.listed: dict[str, int] = {}
            self.http: dict[str, int] = {}
            self.bytes_read = 0

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"storage_calls": sum(self.calls.values()), "calls": dict(sorted(self.calls.items())),
                    "listed_entries": dict(self.listed), "http": dict(sorted(self.http.items())),
                    "http_requests": sum(self.http.values()), "bytes_read": self.bytes_read}  # fmt: skip

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self.depth, "n", 0)
            self.depth.n = depth + 1
            try:
                value = original(*args, **kwargs)
            finally:
                self.depth.n = depth
            if depth == 0:
                with self.lock:
                    self.calls[name] = self.calls.get(name, 0) + 1
                    if name in LISTINGS and value is not None:
                        self.listed[name] = self.listed.get(name, 0) + len(value)
                    data = value[0] if isinstance(value, tuple) else value
                    if isinstance(data, (bytes, bytearray, memoryview)):
                        self.bytes_read += len(data)
            return value

        return counted

    def install(self) -> None:
        from requests.adapters import HTTPAdapter

        from spark_webdataset.storage.base import Storage
        from spark_webdataset.storage.gcs import GCSStorage
        from spark_webdataset.storage.local import LocalStorage
        from spark_webdataset.storage.s3 import S3Storage

        for cls in (LocalStorage, GCSStorage, S3Storage):
            for name in STORAGE_METHODS:
                original = getattr(cls, name, None) or getattr(Storage, name)
                setattr(cls, name, self._wrap(name, original))
        send = HTTPAdapter.send

        def counted_send(adapter: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            kind = http_kind(request.method, request.url, request.headers)
            with self.lock:
                self.http[kind] = self.http.get(kind, 0) + 1
            return send(adapter, request, *args, **kwargs)

        HTTPAdapter.send = counted_send  # type: ignore[method-assign]


def http_kind(method: str, url: str, headers: Any = None) -> str:
    """A request's kind and price class: a GCS JSON API request (A: writes, lists, copies; B: reads;
    free: DELETE) or an S3 REST request (PUT: PUT, COPY, POST, LIST; GET: GET, HEAD; free: DELETE)."""
    path = url.split("?", 1)[0]
    query = url.split("?", 1)[1] if "?" in url else ""
    if "/storage/v1/" not in path:
        return s3_kind(method, path, query, headers or {})
    if method == "DELETE":
        return "delete (free)"
    if "/upload/" in path or method == "PUT":
        return "upload (A)"
    if "rewriteTo" in path or "copyTo" in path or "compose" in path:
        return "copy (A)"
    if method in ("PATCH", "POST"):
        return f"{method.lower()} (A)"
    if path.rstrip("/").endswith("/o"):
        return "list (A)"
    if "alt=media" in query:
        return "get media (B)"
    return "get metadata (B)"


def s3_kind(method: str, path: str, query: str, headers: Any) -> str:
    if method == "DELETE":
        return "s3 delete (free)"
    if method == "HEAD":
        return "s3 head (GET)"
    if method == "GET":
        key = path.split("://", 1)[-1].split("/", 2)[2:]  # host/bucket/key, path-style
        return "s3 get (GET)" if key and key[0] and "list-type" not in query else "s3 list (PUT)"
    if method == "POST":
        return "s3 create multipart (PUT)" if query.startswith("uploads") else "s3 complete / post (PUT)"
    copy = "x-amz-copy-source" in {k.lower() for k in headers}
    if "partNumber" in query:
        return "s3 upload part copy (PUT)" if copy else "s3 upload part (PUT)"
    return "s3 copy (PUT)" if copy else "s3 put (PUT)"


REQUESTS = Requests()


# -- memory -----------------------------------------------------------------------------


def trim() -> None:
    """Give freed memory back before a step, so the step's peak RSS above its start is its own."""
    import gc

    gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def step(fn: Callable[[], Any]) -> Callable[[], dict[str, Any]]:
    """`fn` run with requests counted and this process's RSS sampled every 20 ms."""

    def run() -> dict[str, Any]:
        trim()
        me = psutil.Process()
        start = me.memory_info().rss
        REQUESTS.reset()
        sampler = RssSampler(select=lambda p: "self", interval=0.02, candidates=lambda: [me])
        error = None
        with sampler:
            try:
                value = fn()
            except Exception as failure:  # noqa: BLE001 - recorded: a step that fails at scale is a finding
                value, error = None, f"{type(failure).__name__}: {str(failure)[:400]}"
                print(f"   FAILED: {error}", flush=True)
        peak = sampler.peaks.get(me.pid, start)
        record = {"peak_rss_mib": round(peak / MIB, 1), "rss_growth_mib": round(max(0, peak - start) / MIB, 1),
                  **REQUESTS.snapshot(), **({"error": error} if error else {})}  # fmt: skip
        if isinstance(value, dict):
            record.update(value)
        return record

    return run


# -- the data -----------------------------------------------------------------------------


class Tar(io.BytesIO):
    """A shard the ShardWriter writes into memory (it closes each stream it finishes)."""

    def close(self) -> None:
        self.data = self.getvalue()
        super().close()


def real_shard(keys: list[str]) -> tuple[bytes, Any, pa.RecordBatch]:
    """A real shard of `keys` (field `bin`, 100 B each): its bytes, ShardInfo and TASK_SCHEMA rows."""
    from spark_webdataset.format.shard_writer import ShardWriter

    streams: list[Tar] = []

    def open_shard(_: int) -> Tar:
        streams.append(Tar())
        return streams[-1]

    writer = ShardWriter(["bin"], open_shard, 1 << 40)
    writer.write_batch(pa.array(keys, pa.large_string()), [pa.array([PAYLOAD] * len(keys), pa.large_binary())])
    (info,) = writer.close()
    return streams[0].data, info, pa.concat_batches(writer.index_rows)


def base_keys(shard: int, count: int) -> pa.Array:
    """Shard `shard`'s `count` keys, sorted: b<shard 7 digits>-<i 6 digits>."""
    suffix = pc.utf8_lpad(pc.cast(pa.array(np.arange(count)), pa.string()), 6, "0")
    return pc.binary_join_element_wise(f"b{shard:07d}-", suffix, "").cast(pa.large_string())


def run_bytes(rows: pa.RecordBatch) -> bytes:
    """A task's staged index run as the writer stages it (blocks of at most 65,536 rows)."""
    from spark_webdataset.format.sample_index import write_task_run

    sink = io.BytesIO()
    write_task_run(rows, sink)
    return sink.getvalue()


def stage_base(uri: str, shards: int, keys: int, threads: int, per_task: int = 1) -> tuple[Any, list[Any]]:
    """A writer on `uri` and the commit messages of shards / per_task attempts of `per_task` shards
    each: every shard a real one-sample shard (key b<n>-000000) whose index rows list keys // shards
    keys, all located at that sample."""
    from spark_webdataset.dataset.tree import STAGED_INDEX_NAME, staged_shard_name
    from spark_webdataset.format.sample_index import TASK_SCHEMA
    from spark_webdataset.format.shard_writer import ShardInfo
    from spark_webdataset.spark.writer import WebDatasetCommitMessage

    writer = make_writer(uri, {})
    storage = writer.version.storage
    per_shard = max(1, keys // shards)
    local = not uri.startswith(("gs://", "s3://"))

    def put(path: str, data: bytes) -> None:
        if local:  # untimed staging: plain writes (the commit reads them the same; no fsync needed)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as stream:
                stream.write(data)
        else:
            storage.write_atomic(path, data)

    def one(partition: int) -> Any:
        staging = storage.join(writer.staging_root, f"p{partition:05d}-a0-t{partition}")
        infos, runs = [], []
        for sequence in range(per_task):
            number = partition * per_task + sequence
            names = base_keys(number, per_shard)
            data, info, real = real_shard([names[0].as_py()])
            count = len(names)
            located = [
                np.full(count, real.column(i)[0].as_py(), dtype)
                for i, dtype in ((2, np.int64), (3, np.int64), (4, np.uint32))
            ]
            runs.append(pa.record_batch([names, pa.array(np.full(count, sequence, np.int32)), *map(pa.array, located)],
                                        schema=TASK_SCHEMA))  # fmt: skip
            put(storage.join(staging, staged_shard_name(sequence)), data)
            infos.append(
                ShardInfo(sequence, count, info.bytes, info.crc32c, names[0].as_py(), names[count - 1].as_py())
            )
        index_path = storage.join(staging, STAGED_INDEX_NAME)
        put(index_path, run_bytes(pa.concat_batches(runs)))
        return WebDatasetCommitMessage(partition, 0, partition, staging, infos, index_path, True)

    with ThreadPoolExecutor(threads) as pool:
        return writer, list(pool.map(one, range(shards // per_task)))


def make_writer(uri: str, options: dict[str, str]) -> Any:
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from spark_webdataset.spark.options import WriteOptions
    from spark_webdataset.spark.writer import WebDatasetWriter

    schema = StructType([StructField("__key__", StringType()), StructField("bin", BinaryType())])
    return WebDatasetWriter(WriteOptions.parse({"path": uri, **options}), schema, overwrite=True)


def child_keys(spread_over: int | None) -> list[str]:
    """The child's new keys, sorted: n<i> after every base key (new ids: the blocks they fall in are the
    last), or with `spread_over` base shards b<shard>-x<i> among the base's keys, one every
    spread_over / CHILD_SAMPLES shards (as hashed keys fall: nearly every block of the index)."""
    if spread_over is None:
        return [f"n{i:09d}" for i in range(CHILD_SAMPLES)]
    return [f"b{i * spread_over // CHILD_SAMPLES:07d}-x{i:06d}" for i in range(CHILD_SAMPLES)]


def stage_child(uri: str, parent: str, spread_over: int | None = None) -> tuple[Any, list[Any], list[str]]:
    """One attempt of CHILD_SAMPLES real new samples (child_keys) on `parent`, change append."""
    from spark_webdataset.dataset.tree import STAGED_INDEX_NAME, staged_shard_name
    from spark_webdataset.spark.writer import WebDatasetCommitMessage

    writer = make_writer(uri, {"parent": parent, "change": "append"})
    storage = writer.version.storage
    keys = child_keys(spread_over)
    data, info, rows = real_shard(keys)
    staging = storage.join(writer.staging_root, "p00000-a0-t0")
    storage.write_atomic(storage.join(staging, staged_shard_name(0)), data)
    index_path = storage.join(staging, STAGED_INDEX_NAME)
    storage.write_atomic(index_path, run_bytes(rows))
    return writer, [WebDatasetCommitMessage(0, 0, 0, staging, [info], index_path, True)], keys


def write_report(version_uri: str) -> None:
    """The validation report validation would write for a sound version (untimed): every own shard
    ok with the manifest's crc32c and the listing's identity (the base's index rows are synthetic, so
    validation proper would refuse it)."""
    from spark_webdataset.dataset.index_proof import identity_json, index_files
    from spark_webdataset.dataset.layout import Version
    from spark_webdataset.dataset.validate import ValidationReport

    version = Version.at(version_uri)
    data, _ = version.read_manifest_bytes()
    from spark_webdataset.format.manifest import Manifest

    manifest = Manifest.from_json(data)
    identities = version.storage.identities(version.uri)
    import hashlib

    report = ValidationReport(version.uri, hashlib.sha256(data).hexdigest())
    report.index_files = index_files(version, manifest)
    for shard in manifest.shards:
        report.shards.append({
            "name": shard.location, "ok": True, "samples": shard.samples, "bytes": shard.bytes,
            "crc32c": shard.crc32c, "sha256": None, "errors": 0,
            "identity": identity_json(identities.get(shard.name)) if shard.version is None else None,
        })  # fmt: skip
    version.storage.write_atomic(version.validation_uri, report.to_json())


# -- one dataset size -------------------------------------------------------------------------


def timed_commit(request_of: Callable[[], Any]) -> Callable[[], dict[str, Any]]:
    """commit_job with its merge and rename phases timed (harness.commit_phases_timed)."""
    from spark_webdataset.dataset.commit import commit_job

    def run() -> dict[str, Any]:
        request = request_of()
        with commit_phases_timed() as phases:
            manifest = commit_job(request)
        return {**phases, "samples": manifest.samples, "shards": len(manifest.shards),
                "index_bytes": manifest.sample_index_bytes, "manifest_bytes": len(manifest.to_json())}  # fmt: skip

    return run


def size_cases(root: str, shards: int, keys: int, args: argparse.Namespace, label: str) -> list[dict[str, Any]]:
    """The steps on one root of `shards` shards and `keys` keys (see the module's docstring); a step
    that fails is recorded with its error and ends this size."""
    import spark_webdataset
    from spark_webdataset.dataset.catalog import describe_root
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    base, child = f"{root}/versions/v0000", f"{root}/versions/v0001"
    per_task = args.shards_per_task
    info = {"store": label, "size": shards, "size_unit": "shards", "keys": keys, "shards_per_task": per_task}
    staged: dict[str, Any] = {}
    cases = []

    def case(name: str, fn: Callable[[], Any], work: float, prepare: Callable[[], Any] | None = None) -> bool:
        contender = Contender(step(fn), work, prepare)
        result = measure(Case(f"{label} {shards} {name}", {name: contender}, unit="shards", scale=1,
                              info={**info, "step": name}), args, repeats=1, warmup=0)  # fmt: skip
        cases.append(result)
        return not any("error" in r for c in result["contenders"].values() for r in c["runs"])

    def prepare_base() -> None:
        started = time.perf_counter()
        staged["base"] = stage_base(base, shards, keys, args.stage_threads if label == "local" else 16, per_task)
        print(f"   staged {shards} attempts in {time.perf_counter() - started:.1f} s", flush=True)

    def base_request() -> Any:
        writer, messages = staged.pop("base")
        return writer.commit_request(messages)

    if not case("commit base", timed_commit(base_request), shards, prepare_base):
        return cases
    write_report(base)
    case("publish base", lambda: publish(root, "v0000").as_dict(), shards)

    def prepare_child() -> None:
        writer, messages, keys = stage_child(child, "v0000", shards if args.child_keys == "spread" else None)
        staged["child"], staged["child_keys"] = (writer, messages), keys

    def child_request() -> Any:
        writer, messages = staged.pop("child")
        return writer.commit_request(messages)

    if not case("child commit", timed_commit(child_request), shards, prepare_child):
        return cases

    def validate() -> dict[str, Any]:
        report = validate_version(child, workers=1)
        assert report.ok, report.summary()
        return {"report_shards": len(report.shards)}

    case("validate child", validate, shards)
    case("publish child", lambda: publish(root, "v0001").as_dict(), shards)

    def open_get() -> dict[str, Any]:
        import pyarrow.parquet as pq

        from spark_webdataset.dataset.layout import Dataset

        version, manifest = Dataset(root).latest()  # the index's directory, before anything is counted
        with version.storage.open_read(version.path(manifest.sample_index)) as stream:
            meta = pq.ParquetFile(stream).metadata
        REQUESTS.reset()
        started = time.perf_counter()
        reader = spark_webdataset.open(root)
        opened = time.perf_counter()
        at_open = REQUESTS.snapshot()
        own_key = staged["child_keys"][CHILD_SAMPLES // 2]
        assert reader.get(own_key)["__key__"] == own_key
        got = time.perf_counter()
        at_own = REQUESTS.snapshot()
        referenced_key = f"b{shards // 2:07d}-000000"
        assert reader.get(referenced_key)["__key__"] == referenced_key
        at_end = REQUESTS.snapshot()
        return {"index_row_groups": meta.num_row_groups, "index_footer_bytes": meta.serialized_size,
                "open_s": round(opened - started, 4), "get_s": round(got - opened, 4), "len": len(reader),
                "open_calls": at_open["storage_calls"], "open_bytes": at_open["bytes_read"],
                "open_http": at_open["http_requests"],
                "get_own_calls": at_own["storage_calls"] - at_open["storage_calls"],
                "get_own_bytes": at_own["bytes_read"] - at_open["bytes_read"],
                "get_own_http": at_own["http_requests"] - at_open["http_requests"],
                "get_referenced_calls": at_end["storage_calls"] - at_own["storage_calls"],
                "get_referenced_http": at_end["http_requests"] - at_own["http_requests"]}  # fmt: skip

    case("open + get", open_get, shards)

    def inspect() -> dict[str, Any]:
        described = describe_root(root)
        return {"versions": len(described.versions)}

    case("inspect", inspect, shards)
    return cases


# -- chains of versions ------------------------------------------------------------------------


def build_chain(root: str, versions: int, shards: int) -> list[float]:
    """`versions` published versions of `shards` shards (see the docstring); each publish's seconds."""
    from spark_webdataset.dataset.layout import Dataset
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.tree import WRITER_MARK, sample_index_path, shard_name
    from spark_webdataset.format.manifest import Manifest, ShardEntry
    from spark_webdataset.format.sample_index import write_index

    dataset = Dataset(root)
    source = root + "-source"  # outside the root: hard links need the same file system
    os.makedirs(source)
    data, info, rows = real_shard(["a"])
    with open(f"{source}/shard.tar", "wb") as stream:
        stream.write(data)
    write_index([named_index_row(rows)], f"{source}/index.parquet")
    index_size = os.path.getsize(f"{source}/index.parquet")
    fields = [{"name": "bin", "type": "binary"}]

    def entry(name: str, version: str | None) -> ShardEntry:
        return ShardEntry(name, 1, info.bytes, "a", "a", info.crc32c, None, True, version)

    publish_s: list[float] = []
    first = [entry(shard_name(n), None) for n in range(shards)]
    referenced = [dataclass_replace(e, version="c0000") for e in first]
    for number in range(versions):
        version_id = f"c{number:04d}"
        directory = dataset.version(version_id).uri
        os.makedirs(f"{directory}/_index")
        with open(f"{directory}/_WEBDATASET", "wb") as stream:
            stream.write(WRITER_MARK)
        own = first if number == 0 else [entry(shard_name(shards + number), None)]
        for shard in own:
            os.link(f"{source}/shard.tar", f"{directory}/{shard.name}")
        os.link(f"{source}/index.parquet", f"{directory}/{sample_index_path(0)}")
        manifest = Manifest(
            (own if number == 0 else referenced + own), fields, {}, {"job_id": version_id},
            sample_index_path(0), index_size, None if number == 0 else f"c{number - 1:04d}",
        )  # fmt: skip
        with open(f"{directory}/_manifest.json", "wb") as stream:
            stream.write(manifest.to_json())
        write_report(directory)
        started = time.perf_counter()
        publish(root, version_id)
        publish_s.append(time.perf_counter() - started)
    return publish_s


def named_index_row(rows: pa.RecordBatch) -> pa.RecordBatch:
    from spark_webdataset.format.sample_index import named_rows

    return named_rows(rows, pa.array(["shard-000000.tar"], pa.string()))


def dataclass_replace(value: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(value, **changes)


def chain_cases(root: str, versions: int, shards: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    from spark_webdataset.dataset.catalog import describe_root
    from spark_webdataset.dataset.retention import RetentionPolicy, collect, plan

    label = f"chain {versions}x{shards}"
    info = {
        "store": f"local chain of {versions}",
        "size": shards,
        "size_unit": "shards a version",
        "versions": versions,
    }
    built: dict[str, Any] = {}
    cases = []

    def build() -> dict[str, Any]:
        seconds = build_chain(root, versions, shards)
        built["publish"] = seconds
        return {"publish_mean_s": round(float(np.mean(seconds)), 4), "publish_first_s": round(seconds[0], 4),
                "publish_last_s": round(seconds[-1], 4),
                "publish_last10_mean_s": round(float(np.mean(seconds[-10:])), 4)}  # fmt: skip

    policy = RetentionPolicy(keep_last=3, min_age_seconds=0)
    steps = {
        "build + publish each": (build, versions),
        "inspect": (lambda: {"versions": len(describe_root(root).versions)}, versions),
        "gc plan": (lambda: {"retire": len(plan(root, policy).retired)}, versions),
        "gc": (lambda: {"retired": len(collect(root, policy).retired)}, versions),
        # the next day's gc: what every later run pays for the retired versions whose shards are still referenced
        "gc again": (lambda: {"retired": len(collect(root, policy).retired)}, versions),
    }
    for name, (fn, work) in steps.items():
        contender = Contender(step(fn), work)
        cases.append(measure(Case(f"{label} {name}", {name: contender}, unit="versions", scale=1,
                                  info={**info, "step": name}), args, repeats=1, warmup=0))  # fmt: skip
    return cases


def merge_case(total: int, runs: int, args: argparse.Namespace) -> dict[str, Any]:
    from commit_scaling import merge_contender

    contender = merge_contender(total, runs)
    contender.run = step(contender.run)
    return measure(Case(f"merge {total:,} keys", {f"{runs} runs": contender}, unit="keys", scale=1,
                        info={"store": "memory", "size": total, "size_unit": "keys", "step": "merge"}), args, repeats=1, warmup=0)  # fmt: skip


def index_bytes_case(total: int, shards: int, args: argparse.Namespace) -> dict[str, Any]:
    """The sample index's bytes a key with realistic rows (the size cases' synthetic rows compress to
    ~1 B a key): `total` keys of 16 hex digits (a hash) in key order, ~10 kB samples spread over
    `shards` shards of 3 GiB, in the job's default hash order (each key's shard and offset random)
    and in key order (shards and offsets ascending with the key)."""
    from spark_webdataset.format.sample_index import INDEX_SCHEMA, write_index

    rng = np.random.default_rng(0)
    keys = np.sort(rng.integers(0, 1 << 63, total, dtype=np.int64))
    key_array = pa.array(np.char.mod("%016x", keys).tolist(), pa.string())
    lengths = rng.integers(8_000, 12_000, total, dtype=np.int64)
    names = pa.array([f"shard-{n:06d}.tar" for n in range(shards)], pa.string())
    per_shard = -(-total // shards)
    layouts = {
        "hash order": (rng.integers(0, shards, total), rng.integers(0, 3 << 30, total, dtype=np.int64)),
        "key order": (np.arange(total) // per_shard, (np.cumsum(lengths) - lengths) % (per_shard * 10_000)),
    }

    def contender(shard: np.ndarray, offset: np.ndarray) -> Contender:
        def write() -> dict[str, Any]:
            rows = pa.record_batch([key_array, names.take(pa.array(shard)), pa.array(offset), pa.array(lengths),
                                    pa.array(rng.integers(0, 1 << 32, total, dtype=np.uint32))], schema=INDEX_SCHEMA)  # fmt: skip
            sink = pa.BufferOutputStream()
            write_index([rows.slice(start, 65536) for start in range(0, total, 65536)], sink)
            size = sink.getvalue().size
            return {"index_bytes": size, "bytes_a_key": round(size / total, 2)}

        return Contender(step(write), total)

    return measure(Case(f"index bytes {total:,} keys", {n: contender(*layout) for n, layout in layouts.items()},
                        unit="keys", scale=1, info={"store": "memory", "size": total, "size_unit": "keys",
                                                    "step": "index bytes"}), args, repeats=1, warmup=0)  # fmt: skip


# -- the benchmark ------------------------------------------------------------------------------


def flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--shards", type=int, nargs="+", default=[10_000, 100_000], help="dataset sizes (shards)")
    add("--keys", type=int, default=10_000_000, help="keys of the base version at every size")
    add(
        "--chains",
        nargs="*",
        default=["1000x100", "1000x1000", "100x10000"],
        help="VERSIONSxSHARDS chains for inspect/gc",
    )
    add("--merge-keys", type=int, nargs="*", default=[10_000_000], help="in-memory merges (keys)")
    add("--index-keys", type=int, default=2_000_000, help="keys of the realistic index whose bytes a key are measured")
    add("--gcs-shards", type=int, nargs="*", default=[10_000], help="sizes on fake-gcs-server (none: skip)")
    add("--gcs-keys", type=int, default=1_000_000, help="keys of the base version on the emulator")
    add("--no-gcs", action="store_true")
    add("--s3-shards", type=int, nargs="*", default=[], help="sizes on the S3 server (moto; none by default: slow)")
    add("--s3-keys", type=int, default=100_000, help="keys of the base version on the S3 server")
    add("--stage-threads", type=int, default=4)
    add("--shards-per-task", type=int, default=1, help="shards a staged task attempt holds (tasks = shards / this)")
    add("--child-keys", choices=("after", "spread"), default="after",
        help="the child's new keys: after every base key (new ids), or spread among them (hashed keys)")  # fmt: skip
    add("--only", choices=("sizes", "chains", "merge", "index", "gcs", "s3"), help="run one part")


def quick(args: argparse.Namespace) -> None:
    args.shards, args.keys, args.chains, args.merge_keys = [500, 2000], 200_000, ["50x100", "10x1000"], [1_000_000]
    args.gcs_shards, args.gcs_keys, args.index_keys = [200], 20_000, 200_000
    args.s3_shards, args.s3_keys = [100], 10_000


def ratio_notes(cases: list[dict[str, Any]]) -> list[str]:
    """Each step at its sizes: seconds, CPU, calls, peak RSS growth; the cost ratio against the size ratio."""
    rows, notes = [], []
    by_step: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for case in cases:
        for contender, summary in case["contenders"].items():
            (record,) = summary["runs"]
            step_name = case["step"] if contender == case["step"] or len(case["contenders"]) == 1 else contender
            _note_row(rows, by_step, case, step_name, record)
    return _finish_notes(rows, by_step, notes)


def _note_row(rows: list[list[str]], by_step: dict[tuple[str, str], list[dict[str, Any]]], case: dict[str, Any],
              step_name: str, record: dict[str, Any]) -> None:  # fmt: skip
    """One printed row of a step at a size, and its point for the step's slope."""
    key, size = (case["store"], step_name), case["size"]
    by_step.setdefault(key, []).append({"size": size, **record})
    http = f" http {record['http_requests']}" if record.get("http_requests") else ""
    named = f"{step_name} ({record['bytes_a_key']} B a key)" if "bytes_a_key" in record else step_name
    rows.append([key[0], named, f"{size:,} {case['size_unit']}", f"{record['seconds']:.3f}",
                 f"{record['our_cpu_s']:.2f}", f"{record['storage_calls']}{http}",
                 f"{record['rss_growth_mib']:.0f}"])  # fmt: skip


def _finish_notes(rows: list[list[str]], by_step: dict[tuple[str, str], list[dict[str, Any]]],
                  notes: list[str]) -> list[str]:  # fmt: skip
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_table(["store", "step", "size", "s", "cpu s", "calls", "rss +MiB"], rows)
    notes += [
        "",
        "steps (calls: Storage calls; http: requests to the emulator; rss: peak above the step's start):",
        *buffer.getvalue().splitlines(),
        "",
    ]
    for (store, name), points in by_step.items():
        if len(points) < 2:
            continue
        small, large = points[0], points[-1]
        grow = large["size"] / small["size"]
        cost = large["seconds"] / max(small["seconds"], 1e-6)
        calls = large["storage_calls"] / max(small["storage_calls"], 1)
        slope = (large["seconds"] - small["seconds"]) / (large["size"] - small["size"])
        cpu_slope = (large["our_cpu_s"] - small["our_cpu_s"]) / (large["size"] - small["size"])
        notes.append(f"  {store} {name}: size x{grow:g} -> time x{cost:.1f}, calls x{calls:.1f}, "
                     f"rss +{small['rss_growth_mib']:.0f} -> +{large['rss_growth_mib']:.0f} MiB; "
                     f"slope {slope * 1e6:.2f} us (cpu {cpu_slope * 1e6:.2f} us) a unit")  # fmt: skip
    return notes


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    REQUESTS.install()
    cases: list[dict[str, Any]] = []
    if args.only in (None, "sizes"):
        for shards in args.shards:
            cases += size_cases(os.path.join(workdir, f"size-{shards}"), shards, args.keys, args, "local")
    if args.only in (None, "chains"):
        for chain in args.chains:
            versions, shards = (int(x) for x in chain.split("x"))
            cases += chain_cases(os.path.join(workdir, f"chain-{chain}"), versions, shards, args)
    if args.only in (None, "merge"):
        cases += [merge_case(total, 100, args) for total in args.merge_keys]
    if args.only in (None, "index"):
        cases.append(index_bytes_case(args.index_keys, 3600, args))
    if not args.no_gcs and args.gcs_shards and args.only in (None, "gcs"):
        with emulator(BUCKET):
            for shards in args.gcs_shards:
                cases += size_cases(f"gs://{BUCKET}/size-{shards}", shards, args.gcs_keys, args, "gcs")
    if args.s3_shards and args.only in (None, "s3"):
        from commit_scaling import s3_server

        with s3_server(BUCKET):
            for shards in args.s3_shards:
                cases += size_cases(f"s3://{BUCKET}/size-{shards}", shards, args.s3_keys, args, "s3")
    return {"cases": cases, "notes": ratio_notes(cases)}


BENCH = Benchmark("scale", __doc__, run, flags, quick, defaults={"repeats": 1, "warmup": 0})

if __name__ == "__main__":
    main(BENCH)
