"""Nothing outside the WebDatasetError hierarchy escapes a public call, on bad input or damaged storage.

A walk of the public API (spark_webdataset.open and its samples, `cli.main` for every subcommand,
layout.Dataset/Version, validate_version, publish, gc's collect and plan, pin/unpin, set_latest)
with fuzzed arguments (bad paths and URIs, ids, keys, numbers) over a healthy root and copies of it
damaged one way each (truncated or garbage sample index, index rows pointing outside their shard,
garbage manifest or publish record or LATEST, truncated or missing shards). Every call must return
or raise a WebDatasetError; the CLI may also exit 2 through argparse, and never prints a traceback.
No Spark: a few hundred calls in seconds (the Spark reader's typed errors are the machine's).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spark_webdataset
from spark_webdataset.cli import main as cli_main
from spark_webdataset.errors import WebDatasetError
from tests.model import committer

ESCAPES: list[str] = []  # every untyped escape seen in this module's runs: "call: Type: message"


def _build_root(root: Path) -> None:
    """v1 (published) <- v2 (upsert, published: LATEST) and v3 committed, not published."""
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    rows = {f"k{i:02d}": (f"text {i}", bytes([i]) * 40) for i in range(10)}
    committer.commit(f"{root}/versions/v1", rows, overwrite=True)
    assert validate_version(f"{root}/versions/v1", workers=1, progress=False).ok
    publish(str(root), "v1", logical_date="2026-01-01")
    committer.commit(
        f"{root}/versions/v2", {"k03": ("new", b"n"), "k20": ("x", None)}, overwrite=True, parent="v1", change="upsert"
    )
    assert validate_version(f"{root}/versions/v2", workers=1, progress=False).ok
    publish(str(root), "v2", logical_date="2026-02-01")
    committer.commit(f"{root}/versions/v3", {"z1": ("z", b"z")}, overwrite=True)


def _index_file(version: Path) -> Path:
    return next((version / "_index").glob("*.parquet"))


def _rewrite_index(version: Path, change) -> None:
    """The version's sample index with its rows changed by `change(table) -> table` (same schema)."""
    from spark_webdataset.format.sample_index import INDEX_SCHEMA, read_index, write_index

    path = _index_file(version)
    table = change(read_index(path.read_bytes()).cast(INDEX_SCHEMA))
    with open(path, "wb") as sink:
        write_index(table.cast(INDEX_SCHEMA).to_batches(), sink)


def _set_column(name: str, value):
    def change(table: pa.Table) -> pa.Table:
        column = table.column(name).to_pylist()
        column[0] = value
        return table.set_column(
            table.schema.get_field_index(name), name, pa.array(column, table.schema.field(name).type)
        )

    return change


DAMAGES = {
    "healthy": lambda r: None,
    "index-truncated": lambda r: _index_file(r / "versions/v2").write_bytes(
        _index_file(r / "versions/v2").read_bytes()[:300]
    ),
    "index-garbage": lambda r: _index_file(r / "versions/v2").write_bytes(os.urandom(2000)),
    "index-empty": lambda r: _index_file(r / "versions/v2").write_bytes(b""),
    "index-huge-length": lambda r: _rewrite_index(r / "versions/v2", _set_column("length", 2**40)),
    "index-negative-offset": lambda r: _rewrite_index(r / "versions/v2", _set_column("offset", -512)),
    "index-offset-past-end": lambda r: _rewrite_index(r / "versions/v2", _set_column("offset", 10**9)),
    "index-bad-shard": lambda r: _rewrite_index(r / "versions/v2", _set_column("shard", "../../../etc/passwd")),
    "index-other-key": lambda r: _rewrite_index(r / "versions/v2", _set_column("key", "k99")),
    "index-deleted": lambda r: _index_file(r / "versions/v2").unlink(),
    "manifest-garbage": lambda r: (r / "versions/v2/_manifest.json").write_bytes(b"{not json"),
    "manifest-wrong-types": lambda r: (r / "versions/v3/_manifest.json").write_text(
        json.dumps({"shards": "x", "fields": 3})
    ),
    "manifest-binary": lambda r: (r / "versions/v3/_manifest.json").write_bytes(b"\xff\xfe\x00" * 30),
    "record-garbage": lambda r: (r / "_published/v2.json").write_bytes(b"[1, 2"),
    "record-list": lambda r: (r / "_published/v1.json").write_text("[]"),
    "latest-unknown": lambda r: (r / "LATEST").write_text("v9\n"),
    "latest-hostile": lambda r: (r / "LATEST").write_text("../../x\n"),
    "latest-binary": lambda r: (r / "LATEST").write_bytes(b"\xff\x00\xfe"),
    "shard-truncated": lambda r: (r / "versions/v1/shard-000001.tar").write_bytes(b"\0" * 100),
    "shard-deleted": lambda r: (r / "versions/v1/shard-000000.tar").unlink(),
    "shardindex-garbage": lambda r: (r / "versions/v2/shardindex.json").write_bytes(b"\x00garbage"),
    "validation-garbage": lambda r: (r / "versions/v3/_validation.json").write_bytes(b"{]"),
    "pins-garbage": lambda r: (r / "_pins").mkdir() or (r / "_pins" / "v1").write_bytes(b"\xff"),
    "versions-file": lambda r: shutil.rmtree(r / "versions/v3") or (r / "versions/v3").write_bytes(b"a file"),
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    """One copy of the root per damage."""
    top = tmp_path_factory.mktemp("api-walk")
    healthy = top / "healthy"
    _build_root(healthy)
    out = {}
    for name, damage in DAMAGES.items():
        copy = top / f"root-{name}"
        shutil.copytree(healthy, copy)
        damage(copy)
        out[name] = copy
    return out


IDS = st.sampled_from(
    ["v1", "v2", "v3", "v9", "..", "a/b", "v\uff11", "v\u0430", ".hidden", "", "-", "v" * 200, "v1\n", "v1\x00"]
)
KEYS = st.one_of(
    st.sampled_from(["k00", "k03", "k20", "z1", "", "k99", "a\nb", "\x00", "../k", "k" * 5000]), st.text(max_size=20)
)
NUMBERS = st.sampled_from(["1", "0", "-1", "3", "x", "1e9", "99999999999999999999", "", "nan", "inf"])
DURATIONS = st.sampled_from(["0s", "1h", "-1s", "x", "", "1e400s", "24h", "10m"])


def _paths(roots: dict[str, Path]):
    """(damage, suffix): a root (healthy or damaged), one of its versions or files; or (None, a bad path or URI)."""
    damaged = st.sampled_from(sorted(roots))
    return st.one_of(
        st.tuples(damaged, st.just("")),
        st.tuples(damaged, IDS.map(lambda version: f"/versions/{version}")),
        st.tuples(damaged, st.sampled_from(["/LATEST", "/_published", "/versions", "/versions/v1/shard-000000.tar",
                                            "/versions/v2/_index", "/"])),
        st.tuples(st.none(), st.sampled_from([
            "", "/", "/nonexistent/x", "relative/dir", "x" * 5000, "/tmp/" + "y" * 300, "file://", "file:///nonexistent",
            "gs://", "gs:///x", "s3://bucket/x", "http://example.com/x", "hdfs://h/x", "\x00", "/tmp/\x00x", "~",
            "gs://bucket-without-emulator/x", "..", "/proc/self/mem", "/dev/null",
        ])),
    )  # fmt: skip


def _short(text: str) -> str:
    return text if len(text) < 160 else f"{text[:70]}...({len(text)} chars)...{text[-50:]}"


def _escape(name: str, error: BaseException) -> None:
    ESCAPES.append((_short(name), type(error).__name__, _short(str(error))))


def _call(name: str, fn, *args, **kwargs) -> None:
    """Run a public call; an exception outside WebDatasetError is recorded (the walk goes on)."""
    try:
        result = fn(*args, **kwargs)
        if name.startswith("open"):  # use what came back: its keys, one sample, the first and last
            samples = result
            keys = list(samples.keys())[:3]
            for key in keys:
                samples.get(key)
            if len(samples):
                samples[0]
                samples[len(samples) - 1]
    except WebDatasetError:
        return
    except Exception as error:  # noqa: BLE001 - the point
        _escape(name, error)


def _cli(argv: list[str]) -> None:
    buffer = io.BytesIO()
    out, err = io.TextIOWrapper(buffer, write_through=True), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            _call(f"spark-webdataset {argv[0]} {argv[1:]!r}", cli_main, argv)
        except SystemExit as exit_:
            if exit_.code not in (0, 1, 2):
                _escape(f"spark-webdataset {argv!r}", RuntimeError(f"exit {exit_.code!r}"))
    if "Traceback" in err.getvalue():
        _escape(f"spark-webdataset {argv!r}", RuntimeError("printed a traceback: " + err.getvalue()[-300:]))


def _operations(roots):
    paths = _paths(roots)
    return st.one_of(
        st.tuples(st.just("open"), paths),
        st.tuples(st.just("open.get"), paths, KEYS),
        st.tuples(st.just("open.index"), paths, st.integers(-(2**70), 2**70)),
        st.tuples(
            st.just("cli validate"),
            paths,
            st.lists(st.sampled_from(["bin", "txt", "", "__key__", "x" * 300]), max_size=2),
            st.booleans(),
        ),  # fmt: skip
        st.tuples(
            st.just("cli publish"),
            paths,
            IDS,
            st.sampled_from(["2026-01-01", "x", "", "9999-99-99", "2026-13-40T25:00"]),
        ),
        st.tuples(st.just("cli latest"), paths, st.one_of(st.none(), IDS)),
        st.tuples(st.just("cli inspect"), paths, st.one_of(st.none(), NUMBERS), DURATIONS),
        st.tuples(st.just("cli gc"), paths, NUMBERS, st.one_of(st.none(), NUMBERS), DURATIONS, st.booleans()),
        st.tuples(st.just("cli pin"), paths, IDS, st.booleans()),
        st.tuples(
            st.just("cli get"), paths, KEYS, st.one_of(st.none(), st.sampled_from(["txt", "bin", "__key__", "nope"]))
        ),
        st.tuples(st.just("cli cat"), paths),
        st.tuples(st.just("cli datasets"), paths),
        st.tuples(st.just("layout"), paths, IDS),
        st.tuples(st.just("api"), paths, IDS, st.integers(0, 3)),
    )


def _run(operation, resolve) -> None:
    kind, where, *args = operation
    args = [resolve(where), *args]
    if kind == "open":
        _call(f"open({args[0]!r})", spark_webdataset.open, args[0])
    elif kind in ("open.get", "open.index"):

        def read():
            samples = spark_webdataset.open(args[0])
            return samples.get(args[1]) if kind == "open.get" else samples[args[1]]

        try:
            read()
        except (KeyError, IndexError):  # Sequence/Mapping protocol: a missing key or position
            pass
        except WebDatasetError:
            pass
        except Exception as error:  # noqa: BLE001
            _escape(f"{kind}{tuple(args)!r}", error)
    elif kind == "cli validate":
        path, require, full = args
        _cli(
            [
                "validate",
                path,
                "--workers",
                "1",
                "--quiet",
                *sum((["--require", r] for r in require), []),
                *(["--full"] if full else []),
            ]
        )
    elif kind == "cli publish":
        _cli(["publish", args[0], args[1], "--logical-date", args[2]])
    elif kind == "cli latest":
        _cli(["latest", args[0], *(["--set", args[1], "--by", "fuzz"] if args[1] is not None else [])])
    elif kind == "cli inspect":
        _cli(
            [
                "inspect",
                args[0],
                "--json",
                *(["--keep-last", args[1], "--min-age", args[2]] if args[1] is not None else []),
            ]
        )
    elif kind == "cli gc":
        path, keep, days, age, dry = args
        _cli(
            [
                "gc",
                path,
                "--keep-last",
                keep,
                "--min-age",
                age,
                *(["--keep-days", days] if days else []),
                "--dry-run" if dry else "--json",
            ]
        )
    elif kind == "cli pin":
        _cli(["pin" if args[2] else "unpin", args[0], args[1]])
    elif kind == "cli get":
        _cli(["get", args[0], args[1], *(["--field", args[2]] if args[2] else [])])
    elif kind == "cli cat":
        _cli(["cat", args[0]])
    elif kind == "cli datasets":
        _cli(["datasets", "--folder", args[0], "--json"])
    elif kind == "layout":
        from spark_webdataset.dataset.layout import Dataset, Version

        path, version = args
        _call(f"Dataset({path!r}).published({version!r})", lambda: Dataset(path).published(version))
        _call(f"Dataset({path!r}).latest()", lambda: Dataset(path).latest())
        _call(
            f"Dataset({path!r}).version_ids()",
            lambda: (
                Dataset(path).version_ids(),
                Dataset(path).published_ids(),
                Dataset(path).pinned_ids(),
                Dataset(path).is_dataset_root(),
            ),
        )
        _call(f"Version.at({path!r}).committed_manifest()", lambda: Version.at(path).committed_manifest())
        _call(f"Version.at({path!r}).check_writable()", lambda: Version.at(path).check_writable())
        _call(f"Version.at({path!r}).read_validation()", lambda: Version.at(path).read_validation())
    else:  # the library calls behind the CLI, with arguments the CLI's parser would not let through
        from spark_webdataset.dataset.publish import publish, set_latest
        from spark_webdataset.dataset.retention import RetentionPolicy, collect, pin, plan
        from spark_webdataset.dataset.validate import validate_version

        path, version, which = args
        if which == 0:
            _call(f"validate_version({path!r})", validate_version, path, workers=1, progress=False)
        elif which == 1:
            _call(f"publish({path!r}, {version!r})", publish, path, version)
            _call(f"set_latest({path!r}, {version!r})", set_latest, path, version, by="fuzz")
        elif which == 2:
            _call(f"plan({path!r})", lambda: plan(path, RetentionPolicy(1, min_age_seconds=0)))
            _call(
                f"collect({path!r}, dry_run)",
                lambda: collect(path, RetentionPolicy(1, min_age_seconds=0), dry_run=True),
            )
        else:
            _call(f"pin({path!r}, {version!r})", pin, path, version, by="fuzz")


# Found by the machine on the code before the fix: issue 29 item 3 and more: ArrowInvalid (damaged sample
# index), JSONDecodeError (publish record), UnicodeDecodeError (LATEST), OSError/NotADirectoryError/ValueError
# (paths: too long, a file as a root, NUL), IsADirectoryError (`cat DIR`) escape public calls
def test_no_untyped_exception_escapes_the_public_api(roots) -> None:
    """Hypothesis draws operations over the damaged roots (each on a fresh copy of the root it names);
    every escape is recorded with its call, and the test fails listing each kind once."""
    ESCAPES.clear()
    counts = {"calls": 0}

    @settings(
        max_examples=int(os.environ.get("API_WALK_EXAMPLES", "400")), deadline=None, derandomize=True, database=None
    )
    @given(operation=_operations(roots))
    def walk(operation) -> None:
        work = Path(tempfile.mkdtemp(prefix="api-walk-"))

        def resolve(where) -> str:
            name, suffix = where
            if name is None:
                return suffix
            copy = work / name
            if not copy.exists():
                shutil.copytree(roots[name], copy, symlinks=True)
            return f"{copy}{suffix}"

        try:
            counts["calls"] += 1
            _run(operation, resolve)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    walk()
    kinds: dict[tuple[str, str], tuple[str, str]] = {}
    for name, error, message in ESCAPES:
        kinds.setdefault((name.split("(")[0].split(" [")[0].split("'")[0][:40], error), (name[:300], message))
    print(f"public API walk: {counts['calls']} operations, {len(ESCAPES)} untyped escapes, {len(kinds)} kinds")
    assert not kinds, "untyped exceptions escaped:\n" + "\n".join(
        f"- {error} from {name}: {message}" for (_, error), (name, message) in sorted(kinds.items())
    )
