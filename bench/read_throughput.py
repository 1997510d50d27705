"""Read throughput of format("webdataset") against the webdataset library and Spark's parquet reader.

    .venv/bin/python bench/read_throughput.py --cores 1 --repeats 2 --parts spark,library,direct,gcs
    .venv/bin/python bench/read_throughput.py --quick

Cases "small" (200k x 1 KiB) and "large" (20k x 100 KiB) are written once by our writer
(maxShardBytes 256MiB) and as uncompressed parquet under --workdir (reused by later runs of the
same sizes; --fresh rewrites). Then, on local[N] for each of --cores, interleaved:

  ours        spark.read.format("webdataset").load(dir), count and sum(length()) of every column
  ours-keys   the same with .schema("__key__ string").count(): payloads skipped by seeking
  floor       a Python data source yielding one prebuilt batch of our reader's shape: what any
              Python data source pays to hand these rows to Spark
  parquet     spark.read.parquet(dir), the same aggregate                          target 0.75x
  webdataset  (part library, on the first --cores) wds.WebDataset(urls) in this process,
              touching every member: one core                          target 1.0x on local[1]
  cat         (part library) every shard read into a reused 8 MiB buffer: the page-cache floor

Part gcs: fake-gcs-server gets a copy of each version; gcs-ours (the `ours` aggregate on gs://,
local[1]), gcs-reader (WebDatasetReader.read of every shard in this process) and gcs-download
(blob.download_as_bytes of every shard in turn: the bound) by shard bytes per second. Part
direct: WebDatasetReader.read on the first shard outside Spark, per sample and under cProfile.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
from harness import (
    MIB,
    Benchmark,
    Case,
    Contender,
    Ratio,
    emulator,
    main,
    measure,
    profiled,
    random_batch,
    random_frame,
    start_spark,
    tree_bytes,
)  # fmt: skip
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402

SIZES = {"small": (200_000, 1024), "large": (20_000, 100 * 1024)}
BUCKET = "bench-read"
AGG = ("count(*) AS n", "sum(length(__key__)) AS k", "sum(length(bin)) AS payload")


def flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--cores", default="1,2", help="Spark masters: local[N] for each N")
    add("--cases", default="small,large")
    add("--parts", default="spark,library,direct", help="any of spark, library, direct, gcs")
    add("--workdir", default=None, help="data dir (default /tmp/spark-wds-read-bench[-quick])")
    add("--fresh", action="store_true", help="rewrite the data even if --workdir holds it")
    add("--driver-memory", default="4g")


def quick(args: argparse.Namespace) -> None:
    args.repeats, args.warmup, args.cores = 1, 0, args.cores.split(",")[0]


@dataclass
class FloorPartition(InputPartition):
    rows: int


class FloorReader(DataSourceReader):
    """One prebuilt batch of our reader's shape over and over: no file, no parsing."""

    def __init__(self, options: dict[str, str]) -> None:
        self.rows, self.size, self.parts = (
            int(options["rows"]),
            int(options["sample_bytes"]),
            int(options["partitions"]),
        )

    def partitions(self) -> list[FloorPartition]:
        share = -(-self.rows // self.parts)
        return [FloorPartition(min(share, self.rows - i * share)) for i in range(self.parts)]

    def read(self, partition: FloorPartition) -> Iterator[pa.RecordBatch]:
        count = max(1, (16 * MIB) // self.size)
        base = random_batch(np.arange(count), self.size, np.random.default_rng(0))
        cls = pa.array([b"%d" % (i % 10) for i in range(count)], pa.binary())
        url = pa.repeat(pa.scalar("/some/dir/shard-000000.tar"), count)
        batch = pa.RecordBatch.from_arrays(
            [base.column(0), url, base.column(1), cls], names=["__key__", "__url__", "bin", "cls"]
        )
        for start in range(0, partition.rows, count):
            yield batch.slice(0, min(count, partition.rows - start))


class FloorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_arrow_floor"

    def schema(self) -> str:
        return "__key__ string, __url__ string, bin binary, cls binary"

    def reader(self, schema: Any) -> FloorReader:
        return FloorReader(self.options)


def shard_urls(uri: str) -> list[str]:
    from spark_webdataset.spark.reader import resolve

    return resolve(uri)[0]


def build(args: argparse.Namespace, sizes: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Every case written once as webdataset and parquet (or what an earlier run wrote)."""
    described = os.path.join(args.workdir, "data.json")
    if not args.fresh and os.path.exists(described):
        found = json.loads(open(described).read())
        if all(found.get(n, {}).get("rows") == r and found[n]["sample_bytes"] == s for n, (r, s) in sizes.items()):
            print(f"reusing the data in {args.workdir} (--fresh rewrites it)", flush=True)
            return {n: found[n] for n in sizes}
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    spark = start_spark(2, os.path.join(args.workdir, "spark-local"), args.driver_memory)
    data: dict[str, Any] = {}
    try:
        for name, (rows, size) in sizes.items():
            df = random_frame(spark, rows, size, 2).cache()
            wds, parquet = os.path.join(args.workdir, name, "webdataset"), os.path.join(args.workdir, name, "parquet")
            df.write.format("webdataset").option("maxShardBytes", "256MiB").mode("overwrite").save(wds)
            df.write.option("compression", "none").parquet(parquet)
            df.unpersist()
            data[name] = {"rows": rows, "sample_bytes": size, "payload_bytes": rows * size, "webdataset_dir": wds,
                          "parquet_dir": parquet, "tar_bytes": tree_bytes(wds, ".tar")[0],
                          "parquet_bytes": tree_bytes(parquet, ".parquet")[0]}  # fmt: skip
    finally:
        spark.stop()
    with open(described, "w") as stream:
        json.dump(data, stream, indent=1)
    return data


def expect(data: dict[str, Any], raw: bool = False, keys_only: bool = False) -> Callable[[Any], None]:
    """A check that a run saw every sample and byte (raw: the shards' bytes, no samples)."""

    def check(seen: tuple[int, int]) -> None:
        samples, payload = seen
        assert raw or samples == data["rows"], f"saw {samples} samples, expected {data['rows']}"
        assert keys_only or payload == data["tar_bytes" if raw else "payload_bytes"], f"saw {payload} bytes"

    return check


def aggregate(df: Any, cls: str = "sum(length(cls))") -> tuple[int, int]:
    row = df.selectExpr(*AGG, f"{cls} AS c").collect()[0]
    return int(row["n"]), int(row["payload"])


def library_contenders(data: dict[str, Any]) -> dict[str, Contender]:
    urls = shard_urls(data["webdataset_dir"])

    def webdataset() -> tuple[int, int]:
        import webdataset as wds

        samples = payload = 0
        for sample in wds.WebDataset(urls, shardshuffle=False):
            payload, samples = payload + len(sample["bin"]), samples + 1
            len(sample["cls"]), len(sample["__key__"])
        return samples, payload

    def cat() -> tuple[int, int]:
        buffer, total = bytearray(8 * MIB), 0
        for url in urls:
            with open(url, "rb", buffering=0) as stream:
                while count := stream.readinto(buffer):
                    total += count
        return 0, total

    return {"webdataset": Contender(webdataset, data["payload_bytes"], check=expect(data)),
            "cat": Contender(cat, data["tar_bytes"], check=expect(data, raw=True))}  # fmt: skip


def spark_case(spark: Any, cores: int, name: str, data: dict[str, Any], library: bool) -> Case:
    wds, payload = data["webdataset_dir"], data["payload_bytes"]
    floor = (spark.read.format("bench_arrow_floor").option("rows", data["rows"]).option("sample_bytes", data["sample_bytes"])
             .option("partitions", len(shard_urls(wds))))  # fmt: skip
    contenders = {
        "ours": Contender(lambda: aggregate(spark.read.format("webdataset").load(wds)), payload, check=expect(data)),
        "ours-keys": Contender(lambda: (spark.read.format("webdataset").schema("__key__ string").load(wds).count(), 0),
                               payload, check=expect(data, keys_only=True)),
        "floor": Contender(lambda: aggregate(floor.load()), payload, check=expect(data)),
        "parquet": Contender(lambda: aggregate(spark.read.parquet(data["parquet_dir"]), "sum(cls)"), payload, check=expect(data)),
    }  # fmt: skip
    ratios = [Ratio("ours", "parquet", 0.75), Ratio("ours", "floor"), Ratio("ours-keys", "ours")]  # issue 30
    if library:
        contenders.update(library_contenders(data))
        ratios.insert(0, Ratio("ours", "webdataset", 1.0 if cores == 1 else None))
    return Case(
        f"{name} local[{cores}]", contenders, ratios, info={"rows": data["rows"], "sample_bytes": data["sample_bytes"]}
    )


def gcs_case(spark: Any, name: str, data: dict[str, Any]) -> Case:
    """The case's version copied to gs://, read three ways; rate = shard bytes per second."""
    from spark_webdataset.spark.options import ReadOptions
    from spark_webdataset.spark.reader import ShardPartition, WebDatasetReader, default_schema
    from spark_webdataset.storage.gcs import client, split

    local, prefix = data["webdataset_dir"], f"{name}/webdataset"
    bucket = client().bucket(BUCKET)
    for root, _, files in os.walk(local):
        for file in files:
            bucket.blob(f"{prefix}/{os.path.relpath(os.path.join(root, file), local)}").upload_from_filename(
                os.path.join(root, file)
            )
    uri = f"gs://{BUCKET}/{prefix}"
    urls = shard_urls(uri)

    def reader() -> tuple[int, int]:
        read = WebDatasetReader(ReadOptions(uri), default_schema(ReadOptions(uri)))
        samples = payload = 0
        for index, url in enumerate(urls):
            for batch in read.read(ShardPartition(url, index)):
                samples, payload = (
                    samples + batch.num_rows,
                    payload + (pc.sum(pc.binary_length(batch.column("bin"))).as_py() or 0),
                )
        return samples, payload

    def download() -> tuple[int, int]:
        return 0, sum(len(client().bucket(split(u)[0]).blob(split(u)[1]).download_as_bytes()) for u in urls)

    work = data["tar_bytes"]
    contenders = {
        "gcs-ours": Contender(lambda: aggregate(spark.read.format("webdataset").load(uri)), work, check=expect(data)),
        "gcs-reader": Contender(reader, work, check=expect(data)),
        "gcs-download": Contender(download, work, check=expect(data, raw=True)),
    }
    return Case(f"{name} gs://", contenders, [Ratio("gcs-ours", "gcs-download"), Ratio("gcs-reader", "gcs-download")])


def direct_case(args: argparse.Namespace, name: str, data: dict[str, Any]) -> dict[str, Any]:
    """WebDatasetReader.read on the first shard, no Spark: all columns, keys only; then profiled."""
    from pyspark.sql.types import StructType

    from spark_webdataset.spark.options import ReadOptions
    from spark_webdataset.spark.reader import ShardPartition, WebDatasetReader, default_schema

    options = ReadOptions(data["webdataset_dir"])
    schema, url = default_schema(options), shard_urls(data["webdataset_dir"])[0]
    full, keys = WebDatasetReader(options, schema), WebDatasetReader(options, StructType([schema["__key__"]]))
    rows = sum(b.num_rows for b in full.read(ShardPartition(url, 0)))
    consume = {"all columns": lambda: [b.num_rows for b in full.read(ShardPartition(url, 0))],
               "keys only": lambda: [b.num_rows for b in keys.read(ShardPartition(url, 0))]}  # fmt: skip
    contenders = {n: Contender(fn, rows) for n, fn in consume.items()}
    result = measure(Case(f"{name} direct", contenders, unit="samples", scale=1, info={"shard": url}), args, warmup=1)
    result["profile"] = profiled(consume["all columns"], 12)
    return result


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    args.workdir = args.workdir or f"/tmp/spark-wds-read-bench{'-quick' if args.quick else ''}"
    scale = 20 if args.quick else 1
    sizes = {n: (SIZES[n][0] // scale, SIZES[n][1]) for n in args.cases.split(",")}
    parts = set(args.parts.split(","))
    cores = [int(c) for c in args.cores.split(",")]
    with emulator(BUCKET) if "gcs" in parts else contextlib.nullcontext():  # before any JVM: the workers inherit it
        data = build(args, sizes)
        cases: list[dict[str, Any]] = []
        for n in cores if "spark" in parts else []:
            spark = start_spark(n, os.path.join(workdir, "spark"), args.driver_memory, sources=[FloorDataSource])
            try:
                cases += [
                    measure(spark_case(spark, n, name, d, "library" in parts and n == cores[0]), args)
                    for name, d in data.items()
                ]
            finally:
                spark.stop()
        if "library" in parts and "spark" not in parts:
            cases += [measure(Case(f"{name} python", library_contenders(d)), args) for name, d in data.items()]
        if "gcs" in parts:
            spark = start_spark(1, os.path.join(workdir, "spark"), args.driver_memory)
            try:
                cases += [measure(gcs_case(spark, name, d), args) for name, d in data.items()]
            finally:
                spark.stop()
    if "direct" in parts:
        cases += [direct_case(args, name, d) for name, d in data.items()]
    notes = [f"{c['case']}: {1e6 / s['rate']:.2f} us a sample ({n})" for c in cases if c["case"].endswith("direct")
             for n, s in c["contenders"].items()]  # fmt: skip
    return {"data": data, "cases": cases, "notes": notes}


BENCH = Benchmark("read_throughput", __doc__, run, flags, quick, defaults={"repeats": 3})

if __name__ == "__main__":
    main(BENCH)
