"""Fuzz the paths and version ids that cross the trust boundary (issue 29, "Fuzzers for every input").

Hypothesis feeds URIs and version ids (any Unicode, full-width digits, Cyrillic look-alikes,
superscripts, separators, '..', '.', empty parts, NUL and control characters, lone surrogates,
lengths up to 5,000) to the layout's checks (`check_version_id`, `Dataset`/`Version`
construction, `check_dataset_root`, `Version.check_writable`) and to the CLI (`cli.main`, in
process) over a real dataset root with a published version. Each call either raises an error of
the WebDatasetError hierarchy (the CLI: exits 1 or 2 with a message, never a traceback) or gives a
version directory that is exactly `<root>/versions/<ASCII id>`; nothing is created on disk; each
call takes bounded time. Fixed seed (derandomize) and a budget of a few seconds for CI; the counts
of inputs tried and typed errors are printed and asserted.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from spark_webdataset import cli
from spark_webdataset.dataset.layout import Dataset, Version
from spark_webdataset.dataset.paths import check_dataset_root, check_version_id
from spark_webdataset.errors import InvalidVersionId, WebDatasetError
from tests.model.fuzzing import fuzz_settings
from tests.support.fenced_committer import commit_samples, published
from tests.support.helpers import snapshot_files

ASCII_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)
SLOW_CALL_SECONDS = 5.0  # bounded time: any one call (a CLI run included) takes less
FUZZ = fuzz_settings(150)

# Pieces a hostile user would try, mixed with generated text.
PIECES = [
    "..",
    ".",
    "",
    "/",
    "//",
    "versions",
    "v1",
    "v2",
    "2026-12-01",
    "\x00",
    "\n",
    "\r",
    "\t",
    "\x1b",
    "\x7f",
    "２０２６",
    "v1а",
    "vоl",
    "٢٠٢٦",
    "v²",
    "ｖ1",
    "v1\u0301",
    "\ud800",
    "\u202e",
    "a b",
    "-v",
    ".hidden",
    "_published",
    "LATEST",
    "_staging",
    "x" * 256,
    "é" * 128,
    "x" * 5000,
    "gs://",
    "file://",
    "s3://b",
    "~",
]
ascii_ids = st.from_regex(ASCII_ID, fullmatch=True)
unicode_text = st.text(alphabet=st.characters(codec=None), max_size=24)
surrogates = st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=3)
long_names = st.integers(0, 5000).map(lambda n: "x" * n)
parts = st.one_of(st.sampled_from(PIECES), ascii_ids, unicode_text, surrogates, long_names)
ids = st.one_of(st.sampled_from(PIECES), ascii_ids, unicode_text, surrogates, long_names,
                st.tuples(ascii_ids, parts).map("".join))  # fmt: skip
tails = st.one_of(
    st.lists(parts, max_size=6).map("/".join),
    st.tuples(st.just("versions"), ids).map("/".join),  # ROOT/versions/<id>: the one place a write may land
    # a root inside the root, or ROOT/./versions/ID, ROOT//versions/ID, ROOT/../ds/versions/ID: never
    st.tuples(
        st.one_of(st.sampled_from([".", "..", "", "x", "../ds", "./.", "ds"]), parts), st.just("versions"), ids
    ).map("/".join),
    st.tuples(st.sampled_from([".", "..", "", "./.", "../ds"]), st.just("versions"), ascii_ids).map("/".join),
    st.tuples(st.just("versions"), ids, st.sampled_from(["", "/", "//", "/..", "/x"])).map(
        lambda t: f"{t[0]}/{t[1]}{t[2]}"
    ),
)
schemes = st.sampled_from(["", "file://"])


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    """A folder with a dataset root `ds` (v1 published, v2 committed, never published)."""
    folder = tmp_path_factory.mktemp("fuzz-paths")
    published(str(folder / "ds"), "v1")
    commit_samples(Dataset(str(folder / "ds")).version("v2").uri, "k", 3)
    return folder


def _typed_or_ok(counts: Counter, call) -> object:
    """Run `call`: its result, or None for an error of ours (counted); anything else fails the test."""
    started = time.monotonic()
    try:
        result = call()
    except WebDatasetError as error:
        counts["typed errors"] += 1
        event(type(error).__name__)
        result = None
    finally:
        counts["inputs"] += 1
        assert time.monotonic() - started < SLOW_CALL_SECONDS
    return result


def _check_version_place(version: Version) -> None:
    """A version the layout gave: `<root>/versions/<ASCII id>` exactly, or a plain directory (no id)."""
    if version.id is None:
        assert version.dataset is None
        return
    assert ASCII_ID.fullmatch(version.id) and ".." not in version.id, version.id
    assert version.dataset is not None and version.uri == f"{version.dataset.root}/versions/{version.id}"
    path = version.uri.split("://", 1)[-1].split("/")[1:] if "://" in version.uri else version.uri.split("/")[1:]
    assert not {"..", ".", ""} & set(path), version.uri  # no '..', '.' or empty part after the anchor


def test_fuzz_version_ids() -> None:
    counts: Counter = Counter()

    @FUZZ
    @given(version=ids)
    def check(version: str) -> None:
        accepted = _typed_or_ok(counts, lambda: check_version_id(version))
        if accepted is None:
            with pytest.raises(InvalidVersionId):
                Dataset("/data/ds").version(version)
            return
        counts["accepted"] += 1
        assert accepted == version and ASCII_ID.fullmatch(version) and ".." not in version
        _check_version_place(Dataset("/data/ds").version(version))

    check()
    print(f"fuzz version ids: {dict(counts)}")
    assert counts["inputs"] >= 100 and counts["typed errors"] > 0 and counts["accepted"] > 0


def test_fuzz_uris_through_dataset_and_version_construction() -> None:
    counts: Counter = Counter()

    @FUZZ
    @given(uri=st.one_of(tails, st.tuples(st.sampled_from(["", "file://", "gs://"]), tails).map("".join)))
    def check(uri: str) -> None:
        version = _typed_or_ok(counts, lambda: Version.at(uri))
        if version is not None:
            _check_version_place(version)
        dataset = _typed_or_ok(counts, lambda: Dataset(uri))
        if dataset is not None:
            assert ".." not in dataset.root.split("/") and (dataset.root == "/" or not dataset.root.endswith("/"))

    check()
    print(f"fuzz URIs (construction): {dict(counts)}")
    assert counts["inputs"] >= 200 and counts["typed errors"] > 0


def test_fuzz_write_targets_in_a_dataset_root(sandbox) -> None:
    """A write into `ds` is allowed only at `ds/versions/<ASCII id>`, never into the published v1."""
    counts: Counter = Counter()
    root = str(sandbox / "ds")
    before = snapshot_files(sandbox)

    @FUZZ
    @given(scheme=schemes, tail=tails)
    def check(scheme: str, tail: str) -> None:
        target = f"{scheme}{root}/{tail}"

        def writable() -> Version:
            version = Version.at(target)
            version.check_writable()
            return version

        version = _typed_or_ok(counts, writable)
        if version is not None:
            counts["writable"] += 1
            _check_version_place(version)
            assert version.dataset is not None and version.dataset.root == root and version.id != "v1"
        _typed_or_ok(counts, lambda: check_dataset_root(target))
        assert snapshot_files(sandbox) == before

    check()
    print(f"fuzz write targets: {dict(counts)}")
    assert counts["inputs"] >= 300 and counts["typed errors"] > 0 and counts["writable"] > 0


def test_fuzz_the_cli_arguments(sandbox) -> None:
    """`spark-webdataset` with fuzzed roots, ids and URIs: exit 0, 1 or 2, no traceback, nothing created."""
    counts: Counter = Counter()
    root = str(sandbox / "ds")
    before = snapshot_files(sandbox)

    def run(argv: list[str]) -> None:
        out, err = io.StringIO(), io.StringIO()
        started = time.monotonic()
        with contextlib.chdir(sandbox), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exit_:  # argparse refused an argument: its own usage message
                code = exit_.code
        counts["inputs"] += 1
        assert time.monotonic() - started < SLOW_CALL_SECONDS
        assert code in (0, 1, 2), (argv, code, err.getvalue()[-500:])
        assert "Traceback" not in err.getvalue()
        if code:
            counts["typed errors"] += 1
            event(f"{argv[0]}: exit {code}")
            assert err.getvalue().startswith(("spark-webdataset", "usage:")), (argv, err.getvalue()[-500:])
        assert snapshot_files(sandbox) == before, argv

    @FUZZ
    @given(command=st.sampled_from(["inspect", "latest", "get", "gc"]), scheme=schemes, tail=tails)
    def paths(command: str, scheme: str, tail: str) -> None:
        uri = f"{scheme}{root}/{tail}"
        run({"inspect": ["inspect", uri], "latest": ["latest", uri], "get": ["get", uri, "k00001"],
             "gc": ["gc", uri, "--keep-last", "5", "--dry-run"]}[command])  # fmt: skip

    @FUZZ
    @given(command=st.sampled_from(["publish", "unpin", "get"]), scheme=schemes, version=ids)
    def versions(command: str, scheme: str, version: str) -> None:
        if version == "v2" and command == "publish":
            return  # committed but not validated: refused, as it should be (not what this fuzzes)
        run([command, f"{scheme}{root}", version])  # a missing id creates nothing (no lock, no directory)

    paths()
    versions()
    print(f"fuzz CLI arguments: {dict(counts)}")
    assert counts["inputs"] >= 200 and counts["typed errors"] > 0
