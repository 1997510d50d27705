"""Fuzzing the sample index and the manifest: a typed error or the correct sample, bounded memory and time.

A version is built once by the real ShardWriter and index writer (no Spark); each input then
replaces its `_index/*.parquet` or `_manifest.json` (the shards stay intact) with:
- index rows Hypothesis writes: keys (the version's and others), shard locations (the manifest's,
  `..` paths, other names, nulls), offsets and lengths (real ones, neighbours, negative, 2**40,
  2**62, nulls) and crc32c values (real ones, any uint32, nulls);
- byte-level damage to the index file (cut, bytes overwritten, garbage appended), with or without
  the manifest's size of it following;
- either of those written in segments (format/index_segments.py: blocks of 4 rows, 2 a segment, for
  the write alone), and a segmented index whose directory has a value replaced somewhere in its JSON;
- a manifest with a value replaced somewhere in its JSON tree, or its bytes damaged.
Then `open()` (`get`, `[i]`, `keys()`), the Spark reader's planning and tasks called directly (key
options: the ranged path), and the CLI's `get` (`cli.main`, in process) must answer with a sample
equal to the one written under that key, "no such key" (KeyError/IndexError, the mapping's own
answer), or an error of ours; anything else fails. Python's allocations are traced for each input
(peak under 64 MiB), and each input has a deadline.

Derandomized with a small budget for CI; FUZZ_EXAMPLES=N scales it to N/100 of it. The counts
(inputs, typed errors, samples returned) are printed at the end of each test (`pytest -s`).
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import random
import resource
import shutil
import tempfile
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import BinaryType, StringType, StructField, StructType  # imported before memory is measured

import spark_webdataset
from spark_webdataset import cli
from spark_webdataset.errors import EXIT_BAD_INPUT, EXIT_FAILED, WebDatasetError
from spark_webdataset.format import index_segments, key_filter, sample_index
from spark_webdataset.format.index_segments import open_segments
from spark_webdataset.format.sample_index import INDEX_SCHEMA, read_index, write_index
from spark_webdataset.spark.options import KeyRange, ReadOptions
from spark_webdataset.spark.reader import ShardPartition, WebDatasetReader
from tests.model.fuzzing import fuzz_settings
from tests.support.python_memory import PythonPeak
from tests.support.webdataset_ui_data import commit_table

EXAMPLES = 30  # a test; FUZZ_EXAMPLES=N scales it (tests/model/fuzzing.py)
FUZZ = fuzz_settings(EXAMPLES, deadline=3000)  # ms an input: a slow machine shared by several test runs
PEAK_BYTES = 64 << 20
SAMPLES = 40
COUNTS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)


class Template:
    """The intact version: its files' bytes, and what each key must read back as."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="fuzz-index-"))
        table = pa.table(
            {"id": list(range(SAMPLES)), "txt": [f"text {i} ".encode() * (i % 11 + 1) for i in range(SAMPLES)]}
        )
        self.version = commit_table(
            self.base / "root", "v1", table, fields=[("txt", "txt", "binary")], max_shard_bytes=4096
        )
        self.manifest_bytes = (self.version / "_manifest.json").read_bytes()
        document = json.loads(self.manifest_bytes)
        self.index_path = self.version / document["sample_index"]
        self.index_bytes = self.index_path.read_bytes()
        self.rows = read_index(self.index_bytes).to_pylist()
        self.locations = [shard["name"] for shard in document["shards"]]
        self.expected = {
            f"{i:05d}": {"__key__": f"{i:05d}", "txt": table.column("txt")[i].as_py()} for i in range(SAMPLES)
        }

    def restore(self) -> None:
        (self.version / "_manifest.json").write_bytes(self.manifest_bytes)
        self.index_path.write_bytes(self.index_bytes)

    def set_index(self, data: bytes, follow: bool = True) -> None:
        self.index_path.write_bytes(data)
        if follow:
            document = json.loads(self.manifest_bytes)
            document["sample_index_bytes"] = len(data)
            (self.version / "_manifest.json").write_text(json.dumps(document))


@pytest.fixture(scope="module")
def template():
    made = Template()
    yield made
    shutil.rmtree(made.base, ignore_errors=True)


# -- strategies ------------------------------------------------------------------------------------

REAL = Template.__new__(Template)  # filled lazily: strategies need the real values at draw time
_BIG = [-(2**63), -(2**40), -512, -1, 0, 1, 100, 511, 512, 513, 1024, 2**31, 2**40, 2**62, 2**63 - 1]


def _rows_strategy(template: Template):
    real = template.rows
    keys = st.one_of(st.sampled_from(sorted(template.expected)), st.text(max_size=12), st.none())
    shards = st.one_of(
        st.sampled_from(template.locations),
        st.sampled_from(["../v0/shard-000000.tar", "../../etc/passwd", "/etc/passwd", "shard-999999.tar", "", "."]),
        st.text(max_size=20),
        st.none(),
    )
    known = sorted({row["offset"] for row in real} | {row["length"] for row in real})
    near = st.sampled_from([-2048, -1024, -512, 512, 1024, 4096])  # a block or a few off
    positions = st.one_of(
        st.sampled_from(known),
        st.tuples(st.sampled_from(known), near).map(sum),
        st.sampled_from(_BIG),
        st.integers(-(2**63), 2**63 - 1),
        st.integers(-4, 1 << 16).map(lambda n: n * 512),  # on tar blocks, as the reader expects them
        st.none(),
    )
    crcs = st.one_of(st.sampled_from([row["crc32c"] for row in real]), st.integers(0, 2**32 - 1), st.none())
    per_field = {"key": keys, "shard": shards, "offset": positions, "length": positions, "crc32c": crcs}
    row = st.fixed_dictionaries(per_field)
    names = list(INDEX_SCHEMA.names)
    # the index as written with a few values replaced (the damage a disk or a hand does), the edited rows asked for
    # offsets and lengths are as often moved by a block or two from the row's own as replaced
    change = {name: st.tuples(st.just(name), st.just("set"), values) for name, values in per_field.items()}
    moved = st.tuples(st.sampled_from(["offset", "length"]), st.just("add"), st.sampled_from([-1024, -512, 512, 1024]))
    edit = st.tuples(st.integers(0, len(real) - 1), st.one_of(moved, *change.values()))

    def edited(edits: list) -> tuple[list[dict], list]:
        rows = [dict(one) for one in real]
        for number, (name, how, value) in edits:
            rows[number][name] = value if how == "set" else rows[number][name] + value
        return rows, [rows[number]["key"] for number, _ in edits]

    # or rows made up: real ones, new ones, real ones with some values replaced
    changed = st.sets(st.sampled_from(names))
    mutated = st.tuples(st.sampled_from(real), row, changed).map(
        lambda parts: {name: (parts[1][name] if name in parts[2] else parts[0][name]) for name in names}
    )
    made_up = st.lists(st.one_of(mutated, row, st.sampled_from(real)), max_size=12).map(
        lambda rows: (rows, [one["key"] for one in rows[:3]])
    )
    return st.one_of(st.lists(edit, min_size=1, max_size=3).map(edited), made_up)


def _rows_file(rows: list[dict], order: str, segmented: bool = False) -> bytes:
    """`rows` as an index file; `segmented`: in segments of 2 blocks of 4 rows (a few rows make many)."""
    if order == "sorted":
        rows = sorted(rows, key=lambda row: (row["key"] is None, row["key"] or ""))
    sink = pa.BufferOutputStream()
    with mock.patch.object(sample_index, "BLOCK_ROWS", 4 if segmented else sample_index.BLOCK_ROWS):
        write_index(
            [pa.RecordBatch.from_pylist(rows, schema=INDEX_SCHEMA)], sink, segment_blocks=2 if segmented else None
        )
    return sink.getvalue().to_pybytes()


def _with_directory(data: bytes, document) -> bytes:
    """A segmented index's segments with a tail whose directory is `document` (any JSON)."""
    plain, segments = open_segments(io.BytesIO(data), "index")
    assert plain is None
    sink = io.BytesIO()
    tail = pq.ParquetWriter(sink, index_segments.TAIL_SCHEMA, store_schema=False)
    tail.add_key_value_metadata(
        {"kind": index_segments.DIRECTORY_KIND, index_segments.DIRECTORY_KEY: json.dumps(document),
         index_segments.FILTER_KEY: key_filter.KIND}
    )  # fmt: skip
    tail.close()
    return data[: segments[-1].end] + sink.getvalue()


_damage = st.lists(
    st.one_of(
        st.tuples(st.just("cut"), st.floats(0, 1)),
        st.tuples(st.just("flip"), st.floats(0, 1), st.integers(1, 255)),
        st.tuples(st.just("write"), st.floats(0, 1), st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("append"), st.binary(max_size=64)),
        st.tuples(st.just("tail"), st.integers(1, 64)),  # damage inside the footer, where lengths live
    ),
    min_size=1,
    max_size=4,
)


def _damaged(data: bytes, steps) -> bytes:
    out = bytearray(data)
    for step in steps:
        kind = step[0]
        at = int(step[1] * max(len(out) - 1, 0)) if kind in ("cut", "flip", "write") else 0
        if kind == "cut":
            del out[at:]
        elif kind == "flip" and out:
            out[at] ^= step[2]
        elif kind == "write":
            out[at : at + len(step[2])] = step[2]
        elif kind == "append":
            out += step[1]
        elif kind == "tail" and out:
            position = max(len(out) - step[1], 0)
            out[position] ^= 0x5A
    return bytes(out)


_json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
        st.text(max_size=10), st.sampled_from(["../x.tar", "/etc/passwd", "_index/000000.parquet", "shard-000000.tar"]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)  # fmt: skip


def _paths(value, prefix=()):
    """Every path into a JSON tree (keys and list positions)."""
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for number, inner in enumerate(value):
            yield from _paths(inner, (*prefix, number))


def _replaced(document, path, value, delete: bool):
    if not path:
        return value
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return document


# -- what every public call must do ------------------------------------------------------------------


def _outcome(kind: str, action, check=None) -> None:
    """Run `action`: an error of ours, the mapping's own "no such key", or a result `check` accepts."""
    counts = COUNTS[kind]
    try:
        result = action()
    except WebDatasetError:
        counts["typed errors"] += 1
        return
    except (KeyError, IndexError):  # r.get(absent key), r[i] past the end: the mapping's own answers
        counts["not found"] += 1
        return
    counts["results"] += 1
    if check is not None:
        check(result)


def _exercise(template: Template, kind: str, keys: list[str], positions: list[int]) -> None:
    """Every reader over the (damaged) version: open() by key and position, keys(), the Spark
    reader's planning and ranged tasks, and the CLI's get."""
    uri = str(template.version)
    COUNTS[kind]["inputs"] += 1

    def right_sample(sample: dict) -> None:
        assert sample == template.expected.get(sample["__key__"]), sample

    for key in keys:
        _outcome(kind, lambda: spark_webdataset.open(uri).get(key), right_sample)
    for position in positions:
        _outcome(kind, lambda: spark_webdataset.open(uri)[position], right_sample)
    _outcome(kind, lambda: list(spark_webdataset.open(uri).keys()))

    schema = StructType([StructField("__key__", StringType()), StructField("txt", BinaryType())])
    low = min(keys, default="00010")

    def ranged() -> list[tuple[str, bytes]]:
        reader = WebDatasetReader(ReadOptions(uri, keys=KeyRange(low, low[:-1] + "9")), schema)
        rows = []
        for partition in reader.partitions():
            assert isinstance(partition, ShardPartition)
            for batch in reader.read(partition):
                rows += zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())
        return rows

    def right_rows(rows: list[tuple[str, bytes]]) -> None:
        for key, data in rows:
            assert key in template.expected and data == template.expected[key]["txt"], key

    _outcome(kind, ranged, right_rows)

    for key in keys[:1]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["get", uri, key])
        assert code in (0, EXIT_FAILED, EXIT_BAD_INPUT), (code, err.getvalue())
        if code == 0:
            assert json.loads(out.getvalue())["key"] == key
        COUNTS[kind]["cli exits " + str(code)] += 1


def _bounded(action) -> None:
    """`action` allocating at most PEAK_BYTES more than before it, at its peak (Python's allocations)."""
    with PythonPeak() as measured:
        action()
    assert measured.peak < PEAK_BYTES, f"{measured.peak} bytes allocated at the peak"


_keys = st.lists(
    st.one_of(st.sampled_from([f"{i:05d}" for i in range(SAMPLES)]), st.text(max_size=8)), min_size=1, max_size=3
)
_positions = st.lists(st.integers(-SAMPLES - 2, SAMPLES + 2), max_size=2)


@pytest.fixture(scope="module", autouse=True)
def _report():
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) * 1024
    for kind, counts in sorted(COUNTS.items()):
        print(f"\nfuzz {kind}: " + ", ".join(f"{name} {count}" for name, count in sorted(counts.items())))
    print(f"fuzz: the process's peak memory grew {grown >> 20} MiB")
    assert grown < 512 << 20  # tracemalloc's own traces and Hypothesis's shrinking included


# -- the fuzzers -----------------------------------------------------------------------------------


def test_fuzz_index_rows(template: Template) -> None:
    @FUZZ
    @given(
        data=st.data(), order=st.sampled_from(["sorted", "as drawn"]), segmented=st.booleans(), keys=_keys,
        positions=_positions,
    )  # fmt: skip
    def run(data, order, segmented, keys, positions) -> None:
        template.restore()
        rows, edited = data.draw(_rows_strategy(template))
        template.set_index(_rows_file(rows, order, segmented))
        asked = [key for key in edited if isinstance(key, str)] + keys  # the damaged rows are read
        _bounded(lambda: _exercise(template, "index rows", asked, positions))

    run()
    assert COUNTS["index rows"]["inputs"] >= min(EXAMPLES, 20) and COUNTS["index rows"]["typed errors"] > 0


def test_fuzz_index_bytes(template: Template) -> None:
    @FUZZ
    @given(damage=_damage, follow=st.booleans(), segmented=st.booleans(), keys=_keys, positions=_positions)
    def run(damage, follow, segmented, keys, positions) -> None:
        template.restore()
        intact = _rows_file(template.rows, "sorted", segmented=True) if segmented else template.index_bytes
        template.set_index(_damaged(intact, damage), follow)
        _bounded(lambda: _exercise(template, "index bytes", keys, positions))

    run()
    assert COUNTS["index bytes"]["inputs"] >= min(EXAMPLES, 20) and COUNTS["index bytes"]["typed errors"] > 0


def test_fuzz_manifest(template: Template) -> None:
    @FUZZ
    @given(
        choice=st.integers(0, 10_000), value=_json_values, delete=st.booleans(),
        damage=st.one_of(st.none(), _damage), keys=_keys, positions=_positions,
    )  # fmt: skip
    def run(choice, value, delete, damage, keys, positions) -> None:
        template.restore()
        document = json.loads(template.manifest_bytes)
        paths = list(_paths(document))
        document = _replaced(document, paths[choice % len(paths)], value, delete)
        data = json.dumps(document).encode()
        if damage is not None:
            data = _damaged(data, damage)
        (template.version / "_manifest.json").write_bytes(data)
        _bounded(lambda: _exercise(template, "manifest", keys, positions))

    run()
    assert COUNTS["manifest"]["inputs"] >= min(EXAMPLES, 20) and COUNTS["manifest"]["typed errors"] > 0


def test_fuzz_segment_directory(template: Template) -> None:
    intact = _rows_file(template.rows, "sorted", segmented=True)
    tail = pq.ParquetFile(io.BytesIO(intact)).metadata.metadata
    directory = json.loads(tail[index_segments.DIRECTORY_KEY.encode()])

    @FUZZ
    @given(choice=st.integers(0, 10_000), value=_json_values, delete=st.booleans(), keys=_keys, positions=_positions)
    def run(choice, value, delete, keys, positions) -> None:
        template.restore()
        document = json.loads(json.dumps(directory))
        paths = list(_paths(document))
        template.set_index(_with_directory(intact, _replaced(document, paths[choice % len(paths)], value, delete)))
        _bounded(lambda: _exercise(template, "segment directory", keys, positions))

    template.set_index(intact)  # intact, segments read every sample right
    samples = spark_webdataset.open(str(template.version))
    assert {key: samples.get(key) for key in template.expected} == template.expected
    run()
    counts = COUNTS["segment directory"]
    assert counts["inputs"] >= min(EXAMPLES, 20) and counts["typed errors"] > 0


def test_fuzz_the_mutation_of_issue_29_is_caught() -> None:
    """Each row moved onto another intact sample (its offset, length and crc): never its bytes under this key."""
    made = Template()
    try:
        rng = random.Random(29)
        rows = [dict(row) for row in made.rows]
        others = rows[:]
        rng.shuffle(others)
        moved = [
            {
                **row,
                "shard": other["shard"],
                "offset": other["offset"],
                "length": other["length"],
                "crc32c": other["crc32c"],
            }
            for row, other in zip(rows, others)
        ]
        made.set_index(_rows_file(moved, "sorted"))
        samples = spark_webdataset.open(str(made.version))
        for row in moved:
            try:
                sample = samples.get(row["key"])
            except WebDatasetError:
                continue
            assert sample == made.expected[row["key"]]
    finally:
        shutil.rmtree(made.base, ignore_errors=True)
