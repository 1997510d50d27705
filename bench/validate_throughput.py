"""Validation throughput: `validate_version` against the read+sha256 limit, per core.

    .venv/bin/python bench/validate_throughput.py --cases small,large --workers 1 --repeats 3
    .venv/bin/python bench/validate_throughput.py --quick

Per case one version directory is built with the project's own writer (ShardWriter.write_batch
on pyarrow batches, no Spark; the manifest from its ShardInfo): "small" 200k x 1 KiB `bin` + a
`cls` int, "large" 20k x 100 KiB, 8 shards each. Then, side by side, for each N of --workers:

  validate  validate_version(uri, workers=N, write_report=False)
  limit     each shard read in 1 MiB reads and hashed with sha256; N=1 here, else a fresh
            process pool (fork), one task a shard, as validate_version does

and on the first shard alone, in this process: the per-shard check (format.verify.check_shard,
or verify_shard) against the limit on that shard. Every contender runs once untimed first, so
the shards are in the page cache for all: this is CPU cost, not disk speed. The verdict is by CPU
seconds (this process and its pool's workers): validate >= 0.8x the limit per core. With
--profile (default) the per-shard check on a small-sample shard runs under cProfile.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from harness import Benchmark, Case, Contender, Ratio, main, measure, profiled

READ_CHUNK = 1 << 20
BATCH_ROWS = 4096


def flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--small-samples", type=int, default=200_000)
    add("--large-samples", type=int, default=20_000)
    add("--small-kib", type=int, default=1)
    add("--large-kib", type=int, default=100)
    add("--shards", type=int, default=8)
    add("--workers", default="1,2", help="comma-separated worker/process counts")
    add("--cases", default="small,large")
    add("--workdir", default="/tmp/wds-validate-bench")
    add("--keep", action="store_true", help="keep the built versions")
    add("--no-profile", dest="profile", action="store_false")


def quick(args: argparse.Namespace) -> None:
    args.small_samples //= 20
    args.large_samples //= 20
    args.repeats = 1


def build_version(directory: Path, samples: int, payload: int, shards: int) -> dict[str, Any]:
    """`samples` samples (`bin` of `payload` random bytes, `cls` int) as `shards` shards + manifest."""
    from spark_webdataset.dataset.tree import MANIFEST_NAME, sample_index_path, shard_name
    from spark_webdataset.format.encode import encode_column
    from spark_webdataset.format.manifest import Manifest, ShardEntry
    from spark_webdataset.format.sample_index import INDEX_SCHEMA, TASK_SCHEMA, concat_rows, write_index
    from spark_webdataset.format.shard_writer import ShardWriter

    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    per_shard = -(-samples // shards)
    writer = ShardWriter(["bin", "cls"], lambda i: open(directory / shard_name(i), "wb", buffering=READ_CHUNK),
                         max_shard_bytes=1 << 40, max_samples_per_shard=per_shard)  # fmt: skip
    # One block of random bytes sliced at a random start per batch: distinct payloads, cheaply.
    pool = rng.integers(0, 256, size=BATCH_ROWS * payload + 1_000_003, dtype=np.uint8)
    for start in range(0, samples, BATCH_ROWS):
        count = min(BATCH_ROWS, samples - start)
        keys = pa.array([f"sample/{i:09d}" for i in range(start, start + count)], pa.large_string())
        begin = int(rng.integers(0, 1_000_000))
        buffers = [None, pa.py_buffer((np.arange(count + 1, dtype=np.int64) * payload).tobytes()),
                   pa.py_buffer(pool[begin : begin + count * payload].tobytes())]  # fmt: skip
        binary = pa.LargeBinaryArray.from_buffers(pa.large_binary(), count, buffers)
        cls = pa.array(rng.integers(0, 1000, size=count), pa.int64())
        writer.write_batch(keys, [encode_column(binary, "bin"), encode_column(cls, "cls")])
    infos = writer.close()
    # The sample index the commit would merge from the tasks' rows (keys already ascending).
    rows = concat_rows(writer.index_rows, TASK_SCHEMA)
    names = pa.array([shard_name(info.sequence) for info in infos], pa.string())
    index = directory / sample_index_path(0)
    index.parent.mkdir()
    write_index([pa.record_batch([rows.column(0), names.take(rows.column(1)), *rows.columns[2:]],
                                 names=INDEX_SCHEMA.names)], str(index))  # fmt: skip
    manifest = Manifest(
        sample_index=sample_index_path(0),
        sample_index_bytes=index.stat().st_size,
        shards=[ShardEntry.written(info, shard_name(info.sequence)) for info in infos],
        fields=[
            {"name": "bin", "type": "binary", "nullable": False},
            {"name": "cls", "type": "bigint", "nullable": False},
        ],
        options={"maxShardBytes": 1 << 40, "maxSamplesPerShard": per_shard, "mtime": 0, "allowPax": False},
        run={"bench": "validate_throughput"},
    )
    (directory / MANIFEST_NAME).write_bytes(manifest.to_json())
    return {
        "uri": str(directory),
        "samples": manifest.samples,
        "payload_bytes": payload,
        "shards": len(infos),
        "bytes": manifest.bytes,
    }


def hash_file(path: str) -> tuple[int, str]:
    digest, size, buffer = hashlib.sha256(), 0, bytearray(READ_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as stream:
        while count := stream.readinto(buffer):
            digest.update(view[:count])
            size += count
    return size, digest.hexdigest()


def read_and_hash(paths: list[str], processes: int) -> int:
    if processes == 1:
        return sum(hash_file(p)[0] for p in paths)
    with ProcessPoolExecutor(max_workers=min(processes, len(paths))) as pool:
        return sum(size for size, _ in pool.map(hash_file, paths))


def per_shard_check(uri: str) -> tuple[str, Callable[[], None]]:
    """What validate_version runs per shard, on the first shard: check_shard if the package has
    it (the fast scan with the exact parser as fallback), else verify_shard."""
    from spark_webdataset.dataset.tree import MANIFEST_NAME
    from spark_webdataset.format import verify
    from spark_webdataset.format.manifest import Manifest

    entry = Manifest.from_json((Path(uri) / MANIFEST_NAME).read_bytes()).shards[0]
    expected = {k: getattr(entry, k) for k in ("samples", "bytes", "crc32c", "sha256", "first_key", "last_key")}
    path = str(Path(uri) / entry.name)

    def check() -> None:
        if hasattr(verify, "check_shard"):
            report = verify.check_shard(
                entry.name, lambda: open(path, "rb", buffering=READ_CHUNK), expected, ["bin", "cls"]
            )
        else:
            with open(path, "rb", buffering=READ_CHUNK) as stream:
                report = verify.verify_shard(entry.name, stream, expected, ["bin", "cls"])
        assert report.ok, report.errors

    return ("check_shard" if hasattr(verify, "check_shard") else "verify_shard"), check


def validate(uri: str, workers: int) -> None:
    from spark_webdataset.dataset.validate import validate_version

    report = validate_version(uri, workers=workers, write_report=False)
    assert report.ok, f"validation of the benchmark version failed:\n{report.summary()}"


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    sizes = {"small": (args.small_samples, args.small_kib * 1024), "large": (args.large_samples, args.large_kib * 1024)}
    versions, cases, notes = {}, [], []
    try:
        for name in args.cases.split(","):
            built = versions[name] = build_version(Path(args.workdir) / name, *sizes[name], args.shards)
            uri, paths = built["uri"], sorted(str(p) for p in Path(built["uri"]).glob("shard-*.tar"))
            for n in [int(w) for w in args.workers.split(",")]:
                contenders = {"validate": Contender(lambda n=n: validate(uri, n), built["bytes"]),
                              "limit": Contender(lambda n=n: read_and_hash(paths, n), built["bytes"])}  # fmt: skip
                case = Case(f"{name} N={n}", contenders, [Ratio("validate", "limit", 0.8, by="cpu")], info=built)
                cases.append(measure(case, args))
            label, check = per_shard_check(uri)
            one = os.path.getsize(paths[0])
            contenders = {label: Contender(check, one), "limit": Contender(lambda: read_and_hash(paths[:1], 1), one)}
            cases.append(measure(Case(f"{name} 1 shard", contenders, [Ratio(label, "limit", 0.8, by="cpu")]), args))
            if args.profile and name == "small":
                cases[-1]["profile"] = top = profiled(check, 15)
                notes += [
                    f"{label} profile, own time: "
                    + "; ".join(f"{e['function']} {e['tottime_s']:.4f} s" for e in top[:8])
                ]
    finally:
        if not args.keep:
            shutil.rmtree(args.workdir, ignore_errors=True)
    return {"versions": versions, "cases": cases, "notes": notes}


BENCH = Benchmark("validate_throughput", __doc__, run, flags, quick, defaults={"repeats": 3})

if __name__ == "__main__":
    main(BENCH)
