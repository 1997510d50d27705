"""What a reader process pays to open a large sample index and answer its first keys
(format.sample_index.IndexFile, as `open()`, the Spark reader's key options and change plans use it).

    .venv/bin/python bench/index_open.py            # 10M, 30M and 100M keys (~5 min, 4 GB of /tmp)
    .venv/bin/python bench/index_open.py --quick    # 2M keys

One index of --keys rows (blocks of 8,192, keys as the bench's shards hold them) written twice:

  plain      one parquet file: its footer holds every block's statistics (every index before
             session 30)                                                               (baseline)
  segmented  what write_index writes now: segments of 128 blocks and a tail with their directory (ours)

Each run is a fresh Python process (its RSS is the figure) that opens the file through the ranged
reads a bucket would serve (LocalStorage.read_range, counted by a spy that calls the real one),
then looks up --gets keys spread over the whole index. Reported per run: RSS growth from before the
open to after the first get and after all the gets, ranged reads and bytes to open and answer the
first key and all of them, and their time. The time figure is the whole process (interpreter start and imports included, the same
for both).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from harness import PLUGINS, Benchmark, Case, Contender, Ratio, main, measure

PROBE = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import pyarrow, pyarrow.parquet  # imported before the baseline RSS: both contenders need them
from spark_webdataset.format.sample_index import IndexFile
from spark_webdataset.storage.base import RangeFile
from spark_webdataset.storage.local import LocalStorage

path, keys = sys.argv[2], json.loads(sys.argv[3])
reads = [0, 0]
real = LocalStorage.read_range

def counted(self, where, offset, length):  # a spy: counts, then the real read
    reads[0] += 1
    reads[1] += length
    return real(self, where, offset, length)

LocalStorage.read_range = counted

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

import os
before = rss()
started = time.perf_counter()
index = IndexFile(lambda: RangeFile(LocalStorage(), path, os.path.getsize(path)), cache_blocks=16)
assert index.get(keys[0]).key == keys[0]
first = {"first_get_s": time.perf_counter() - started, "first_get_reads": reads[0], "first_get_bytes": reads[1],
         "first_get_rss_mib": round((rss() - before) / 2**20, 1)}
for key in keys[1:]:
    assert index.get(key).key == key
print(json.dumps({**first, "gets_s": time.perf_counter() - started, "reads": reads[0], "bytes_read": reads[1],
                  "rss_growth_mib": round((rss() - before) / 2**20, 1)}))
"""


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keys", type=int, nargs="+", default=[10_000_000, 30_000_000, 100_000_000], help="rows of each index"
    )
    parser.add_argument("--gets", type=int, default=100, help="keys looked up after the open")


def quick(args: argparse.Namespace) -> None:
    args.keys, args.repeats, args.warmup = [2_000_000], 1, 0


def index_key(number: np.ndarray) -> pa.Array:
    """Key `number` of the index (sorted as the numbers are), as the bench's shards hold them."""
    import pyarrow.compute as pc

    shard = pc.utf8_lpad(pc.cast(pa.array(number // 1000), pa.string()), 7, "0")
    row = pc.utf8_lpad(pc.cast(pa.array(number % 1000), pa.string()), 6, "0")
    return pc.binary_join_element_wise("b", shard, "-", row, "")


def write(path: str, keys: int, segment_blocks: int | None) -> None:
    """An index of `keys` rows, written a million rows at a time (memory: one slice)."""
    import pyarrow.compute as pc

    from spark_webdataset.format.sample_index import INDEX_SCHEMA, write_index

    def batches():
        for start in range(0, keys, 1 << 20):
            numbers = np.arange(start, min(keys, start + (1 << 20)))
            yield pa.table({
                "key": index_key(numbers), "shard": pc.binary_join_element_wise(
                    "shard-", pc.utf8_lpad(pc.cast(pa.array(numbers // 1000), pa.string()), 6, "0"), ".tar", ""),
                "offset": pa.array(numbers % 1000 * 2048), "length": pa.array(np.full(len(numbers), 1536)),
                "crc32c": pa.array(np.zeros(len(numbers), np.uint32)),
            }).cast(INDEX_SCHEMA).to_batches()[0]  # fmt: skip

    write_index(batches(), path, segment_blocks=segment_blocks)


def probe(path: str, keys: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, PLUGINS, path, json.dumps(keys)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    cases, notes = [], []
    for count in args.keys:
        plain, segmented = (
            str(Path(workdir) / f"plain-{count}.parquet"),
            str(Path(workdir) / f"segmented-{count}.parquet"),
        )
        write(plain, count, segment_blocks=1 << 30)  # one segment: the whole file, as before segments
        write(segmented, count, segment_blocks=None)
        picks = np.random.default_rng(30).choice(count, size=args.gets, replace=False)
        keys = index_key(picks).to_pylist()
        contenders = {
            "plain": Contender(lambda p=plain, k=keys: probe(p, k), args.gets),
            "segmented": Contender(lambda p=segmented, k=keys: probe(p, k), args.gets),
        }
        info = {"index_keys": count, "gets": args.gets, "plain_bytes": os.path.getsize(plain),
                "segmented_bytes": os.path.getsize(segmented)}  # fmt: skip
        case = measure(Case(f"open + {args.gets} gets, {count:,} keys", contenders, [Ratio("segmented", "plain")],
                            unit="gets", scale=1, info=info), args)  # fmt: skip
        cases.append(case)
        for name in contenders:
            last = [r for r in case["contenders"][name]["runs"] if not r["warmup"]][-1]
            notes.append(
                f"{count:,} keys, {name}: first get +{last['first_get_rss_mib']} MiB RSS, {last['first_get_reads']} "
                f"reads / {last['first_get_bytes'] / 2**20:.2f} MiB in {last['first_get_s'] * 1000:.0f} ms; "
                f"{args.gets} gets +{last['rss_growth_mib']} MiB, {last['reads']} reads / "
                f"{last['bytes_read'] / 2**20:.1f} MiB in {last['gets_s']:.2f} s"
            )
    return {"cases": cases, "notes": notes}


BENCH = Benchmark("index_open", __doc__, run, flags, quick, defaults={"repeats": 2, "warmup": 0})

if __name__ == "__main__":
    main(BENCH)
