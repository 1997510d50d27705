"""What the Spark reader's whole-shard crc32c check costs: the reader's tasks run in process, no Spark.

    .venv/bin/python bench/reader_checks.py                  # 200,000 samples of 1 KiB, one run each
    .venv/bin/python bench/reader_checks.py --samples 20000  # smoke run

Writes one version of --samples samples (a 1 KiB binary field each) in shards of 256 MiB with the
real ShardWriter and a manifest, then reads every shard through `WebDatasetReader.read` (the code a
Spark task runs: fast_read's batches into Arrow record batches), once with the manifest's crc32c
(the check: every byte through `Crc32cReader`, no seeks) and once with the crc32c removed from the
partitions (as a manifest without one reads: no check). Wall and CPU time of each, in that order and
then the other (--rounds), and the ratio. The page cache is warm after the write: this is the CPU
cost of the check, not of the storage.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time

import pyarrow as pa
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.manifest import Manifest, ShardEntry
from spark_webdataset.format.shard_writer import ShardWriter
from spark_webdataset.spark.options import ReadOptions
from spark_webdataset.spark.reader import WebDatasetReader

SHARD_BYTES = 256 << 20


def write_version(directory: str, samples: int, sample_bytes: int) -> None:
    names: list[str] = []

    def open_shard(index: int):
        names.append(f"shard-{index:06d}.tar")
        return open(os.path.join(directory, names[-1]), "wb")

    writer = ShardWriter(["bin"], open_shard, SHARD_BYTES)
    payload = os.urandom(sample_bytes)
    step = 50_000
    for start in range(0, samples, step):
        count = min(step, samples - start)
        keys = pa.array([f"{i:08d}" for i in range(start, start + count)])
        writer.write_batch(keys, [encode_column(pa.array([payload] * count, pa.binary()), "bin")])
    infos = writer.close()
    shards = [
        ShardEntry(names[i.sequence], i.samples, i.bytes, i.first_key, i.last_key, crc32c=i.crc32c) for i in infos
    ]
    manifest = Manifest(shards=shards, fields=[{"name": "bin", "type": "binary"}], options={})
    with open(os.path.join(directory, "_manifest.json"), "wb") as out:
        out.write(manifest.to_json())


def read_all(reader: WebDatasetReader, checked: bool) -> tuple[float, float, int]:
    partitions = reader.partitions()
    if not checked:
        partitions = [dataclasses.replace(p, expected=dataclasses.replace(p.expected, crc32c=None)) for p in partitions]
    wall, cpu = time.perf_counter(), time.process_time()
    rows = sum(batch.num_rows for partition in partitions for batch in reader.read(partition))
    return time.perf_counter() - wall, time.process_time() - cpu, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--sample-bytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=1, help="each round reads checked, unchecked, unchecked, checked")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="bench-reader-checks-")
    try:
        write_version(directory, args.samples, args.sample_bytes)
        schema = StructType([StructField("__key__", StringType()), StructField("bin", BinaryType())])
        reader = WebDatasetReader(ReadOptions(directory), schema)
        total = sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if n.endswith(".tar"))
        results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for _ in range(args.rounds):
            for checked in (True, False, False, True):
                wall, cpu, rows = read_all(reader, checked)
                assert rows == args.samples, rows
                results[checked].append((wall, cpu))
        for checked in (False, True):
            best_wall = min(wall for wall, _ in results[checked])
            best_cpu = min(cpu for _, cpu in results[checked])
            print(
                f"{'with' if checked else 'without'} the crc32c check: {best_wall:.3f} s wall, {best_cpu:.3f} s CPU "
                f"({total / best_wall / 1e6:.0f} MB/s of tar, {args.samples} samples)"
            )
        ratio = min(w for w, _ in results[True]) / min(w for w, _ in results[False])
        print(f"checked / unchecked wall time: {ratio:.3f}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
