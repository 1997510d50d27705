"""Finding a change's keys in a sample index: what an upsert's or delete's plan, and the commit's and
validation's uniqueness checks, read (index_merge.BaseIndex.rows_holding, format.sample_index.IndexFile.rows_matching).

    .venv/bin/python bench/change_lookup.py            # 10M keys, changes of 1k, 100k and 1M keys
    .venv/bin/python bench/change_lookup.py --quick    # 2M keys, 1k and 100k

One real index file of --keys rows (blocks of 8,192, as the commit writes it), keys spread over it
as hashed keys fall (every --keys/N-th existing key: every block holds some). Per change size,
interleaved:

  scan     every live row of the file, each block matched against a set of all the change's keys
           (the change plan before session 29: Arrow's is_in builds that set again for every block) (baseline)
  matching rows_matching: only the blocks the keys fall in, each against the keys in its own range (ours)

Both must find every key once. CPU-bound: the file is in the page cache after the first read.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from harness import Benchmark, Case, Contender, Ratio, main, measure


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", type=int, default=10_000_000, help="rows of the index")
    parser.add_argument(
        "--changes", type=int, nargs="+", default=[1_000, 100_000, 1_000_000], help="keys a change looks up"
    )


def quick(args: argparse.Namespace) -> None:
    args.keys, args.changes, args.repeats, args.warmup = 2_000_000, [1_000, 100_000], 1, 0


def index_key(number: np.ndarray) -> pa.Array:
    """Key `number` of the index (sorted as the numbers are), as the bench's shards hold them."""
    import pyarrow.compute as pc

    shard = pc.utf8_lpad(pc.cast(pa.array(number // 1000), pa.string()), 7, "0")
    row = pc.utf8_lpad(pc.cast(pa.array(number % 1000), pa.string()), 6, "0")
    return pc.binary_join_element_wise("b", shard, "-", row, "")


def run(args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    import pyarrow.compute as pc

    from spark_webdataset.dataset.index_layers import IndexPart
    from spark_webdataset.dataset.index_merge import BaseIndex, base_part_rows
    from spark_webdataset.format.sample_index import INDEX_SCHEMA, write_index

    numbers = np.arange(args.keys)
    table = pa.table({
        "key": index_key(numbers), "shard": pc.binary_join_element_wise(
            "shard-", pc.utf8_lpad(pc.cast(pa.array(numbers // 1000), pa.string()), 6, "0"), ".tar", ""),
        "offset": pa.array(numbers % 1000 * 2048), "length": pa.array(np.full(args.keys, 1536)),
        "crc32c": pa.array(np.zeros(args.keys, np.uint32)),
    }).cast(INDEX_SCHEMA)  # fmt: skip
    path = str(Path(workdir) / "index.parquet")
    write_index(table.to_batches(max_chunksize=1 << 20), path)
    part = IndexPart(path, os.path.getsize(path), None)
    listed = frozenset(pc.unique(table.column("shard")).to_pylist())
    base = BaseIndex([part], listed)
    cases = []
    for change in args.changes:
        keys = index_key(numbers[:: max(1, args.keys // change)][:change]).cast(pa.large_string())

        def scan(keys: pa.Array = keys) -> dict[str, int]:
            return {
                "found": sum(len(b.filter(pc.is_in(b.column(0), value_set=keys))) for b in base_part_rows(part, listed))
            }

        def matching(keys: pa.Array = keys) -> dict[str, int]:
            return {"found": sum(len(batch) for batch in base.rows_holding(keys))}

        def found_all(record: dict[str, int], wanted: int = len(keys)) -> None:
            assert record["found"] == wanted, record

        contenders = {
            "scan": Contender(scan, change, check=found_all),
            "matching": Contender(matching, change, check=found_all),
        }
        info = {"index_keys": args.keys, "change_keys": change, "blocks": -(-args.keys // 8192)}
        cases.append(measure(Case(f"{change:,} keys in {args.keys:,}", contenders, [Ratio("matching", "scan")],
                                  unit="keys", scale=1, info=info), args))  # fmt: skip
    return {"cases": cases, "notes": []}


BENCH = Benchmark("change_lookup", __doc__, run, flags, quick, defaults={"repeats": 2, "warmup": 0})

if __name__ == "__main__":
    main(BENCH)
