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

Both must find every key once. Then, for --plan-changes sizes, the whole plan's reads (the rows the
keys remove, then every row the touched shards keep: with spread keys, every shard is touched):

  plan before   both passes as before session 29 (each block matched against sets of all the keys
                and of the touched shards)                                                     (baseline)
  plan          changes._kept_rows after rows_holding (the removed keys' set built once)          (ours)

Then, for --absent-changes sizes, the uniqueness check of a day's new keys (commit.layer_rows_near,
as the commit and validation's change proof run it on each layer a version keeps), on a second
index of --keys hashed keys (16 hex digits, as content ids fall: every new key in another block):

  every block   the index as one plain parquet file, as before session 30: every block a new key
                falls in is read                                                          (baseline)
  filtered      the index as write_index writes it now (segments, a key filter a block): a
                segment's filters in one read, then only the blocks they may hold a key of (ours)

Both must find none of the keys; reads and bytes are counted (a spy on LocalStorage.read_range
that calls the real one).

CPU-bound: the file is in the page cache after the first read.
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
    parser.add_argument("--plan-changes", type=int, nargs="*", default=[1_000, 100_000], help="keys of whole plans")
    parser.add_argument(
        "--absent-changes", type=int, nargs="*", default=[10_000, 100_000], help="new keys proven absent"
    )


def quick(args: argparse.Namespace) -> None:
    args.keys, args.changes, args.plan_changes, args.repeats, args.warmup = 2_000_000, [1_000, 100_000], [1_000], 1, 0
    args.absent_changes = [10_000]


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
    for change in args.plan_changes:
        keys = index_key(numbers[:: max(1, args.keys // change)][:change]).cast(pa.large_string())
        cases.append(measure(plan_case(base, part, listed, keys, args.keys), args))
    if args.absent_changes:
        cases += absent_cases(args, workdir)
    return {"cases": cases, "notes": []}


def absent_cases(args: argparse.Namespace, workdir: str) -> list[dict[str, Any]]:
    """New hashed keys proven absent from an index of hashed keys, without and with key filters."""
    from spark_webdataset.dataset.index_layers import IndexPart
    from spark_webdataset.dataset.index_merge import layer_rows_near
    from spark_webdataset.format.sample_index import INDEX_SCHEMA, write_index
    from spark_webdataset.storage.local import LocalStorage

    rng = np.random.default_rng(30)
    drawn = np.unique(rng.integers(0, 1 << 63, args.keys + max(args.absent_changes) * 2, dtype=np.int64))
    rng.shuffle(drawn)
    existing = np.sort(drawn[: args.keys])
    hexed = pa.array([f"{n:016x}" for n in existing.tolist()])
    shards = pa.array([f"shard-{n % 3600:06d}.tar" for n in range(args.keys)])
    table = pa.table({"key": hexed, "shard": shards, "offset": pa.array(rng.integers(0, 3 << 30, args.keys)),
                      "length": pa.array(np.full(args.keys, 10752)),
                      "crc32c": pa.array(rng.integers(0, 1 << 32, args.keys).astype(np.uint32))}).cast(INDEX_SCHEMA)  # fmt: skip
    paths = {
        "every block": str(Path(workdir) / "hashed-plain.parquet"),
        "filtered": str(Path(workdir) / "hashed.parquet"),
    }
    write_index(table.to_batches(max_chunksize=1 << 20), paths["every block"], segment_blocks=1 << 30)
    write_index(table.to_batches(max_chunksize=1 << 20), paths["filtered"])
    listed = frozenset(shards.unique().to_pylist())
    reads = [0, 0]
    real_read = LocalStorage.read_range

    def counted(self, path, offset, length):  # a spy: counts, then the real read
        reads[0] += 1
        reads[1] += length
        return real_read(self, path, offset, length)

    LocalStorage.read_range = counted  # type: ignore[method-assign]
    cases = []
    for change in args.absent_changes:
        new = np.sort(drawn[args.keys : args.keys + change])
        keys = pa.array([f"{n:016x}" for n in new.tolist()], pa.large_string())

        def check(path: str, keys: pa.Array = keys) -> dict[str, int]:
            reads[:] = [0, 0]
            part = IndexPart(path, os.path.getsize(path), None)
            found = sum(len(batch) for batch in layer_rows_near(part, listed, keys))
            return {"found": found, "reads": reads[0], "bytes_read": reads[1]}

        def none_found(record: dict[str, int]) -> None:
            assert record["found"] == 0, record

        contenders = {
            name: Contender(lambda p=path: check(p), change, check=none_found) for name, path in paths.items()
        }
        info = {"index_keys": args.keys, "new_keys": change, "blocks": -(-args.keys // 8192),
                "plain_bytes": os.path.getsize(paths["every block"]), "filtered_bytes": os.path.getsize(paths["filtered"])}  # fmt: skip
        case = measure(Case(f"{change:,} new keys against {args.keys:,} hashed", contenders,
                            [Ratio("filtered", "every block")], unit="keys", scale=1, info=info), args)  # fmt: skip
        for name in contenders:
            last = [r for r in case["contenders"][name]["runs"] if not r["warmup"]][-1]
            print(f"   {name}: {last['reads']} reads, {last['bytes_read'] / 1e6:.1f} MB", flush=True)
        cases.append(case)
    LocalStorage.read_range = real_read  # type: ignore[method-assign]
    return cases


def plan_case(base: Any, part: Any, listed: frozenset[str], keys: pa.Array, index_keys: int) -> Case:
    """A whole change plan's reads of the index, before and now (see the module's docstring)."""
    import pyarrow.compute as pc

    from spark_webdataset.dataset.changes import _kept_rows
    from spark_webdataset.dataset.index_merge import base_part_rows
    from spark_webdataset.format.manifest import ShardEntry
    from spark_webdataset.format.sample_index import MERGE_SCHEMA

    entries = {shard: ShardEntry(shard, 1000, 0, "", "", keys_ascending=False) for shard in listed}

    def before() -> dict[str, int]:
        hits = [b.filter(pc.is_in(b.column(0), value_set=keys)) for b in base_part_rows(part, listed)]
        removed = pa.Table.from_batches(hits, schema=MERGE_SCHEMA)
        touched = pc.unique(removed.column("shard").combine_chunks())
        kept = [b.filter(pc.and_(pc.is_in(b.column(1), value_set=touched),
                                 pc.invert(pc.is_in(b.column(0), value_set=keys))))
                for b in base_part_rows(part, listed)]  # fmt: skip
        return {"removed": removed.num_rows, "kept": sum(len(b) for b in kept)}

    def now() -> dict[str, int]:
        removed = pa.Table.from_batches(list(base.rows_holding(keys)), schema=MERGE_SCHEMA)
        touched = pc.unique(removed.column("shard").combine_chunks())
        kept = _kept_rows(base, touched, keys, removed, entries, MERGE_SCHEMA)
        return {"removed": removed.num_rows, "kept": kept.num_rows}

    def same(record: dict[str, int]) -> None:
        assert record["removed"] == len(keys) and record["removed"] + record["kept"] <= index_keys, record

    contenders = {
        "plan before": Contender(before, len(keys), check=same),
        "plan": Contender(now, len(keys), check=same),
    }
    info = {"index_keys": index_keys, "change_keys": len(keys)}
    return Case(f"plan of {len(keys):,} keys in {index_keys:,}", contenders, [Ratio("plan", "plan before")],
                unit="keys", scale=1, info=info)  # fmt: skip


BENCH = Benchmark("change_lookup", __doc__, run, flags, quick, defaults={"repeats": 2, "warmup": 0})

if __name__ == "__main__":
    main(BENCH)
