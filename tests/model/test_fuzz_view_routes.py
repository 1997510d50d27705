"""Fuzzing the WebDataset view's HTTP routes (issue 29's fuzzers; airflow/ui/app.py).

The app is served as tests/unit/airflow/ui/test_summary_view.py serves it (FastAPI's TestClient, the
login dependency overridden) over a real published version, a committed one and a damaged one.
Dataset names, version ids, shard names, keys and query parameters are fuzzed (unicode, `..`,
separators, encodings, lengths). Every answer is 200, or a 4xx with a message; never a 5xx. No file
outside the dataset's root and the config folder is opened (a Python audit hook records every open
under the test's directory), and nothing of a dataset that is not configured, nor a file beside the
root, comes back. Derandomized, a few seconds; counts asserted.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.model.fuzzing import fuzz_settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from spark_webdataset.airflow.ui.app import create_app
from spark_webdataset.dataset.validate import validate_version
from tests.support.webdataset_ui_data import commit_table, digits_table, published_digits, write_digits_config

FUZZ = fuzz_settings(200)
SECONDS_PER_REQUEST = 10.0
SECRET = "TOPSECRET-5b1f0c"  # beside the root and in an unconfigured dataset: never served
HIDDEN_VERSION = "20991231T000000Z"  # a version of the unconfigured dataset
PUBLISHED, COMMITTED, BROKEN = "20261201T000000Z", "20261202T000000Z", "20261203T000000Z"

_opened: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _opened is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # there is no removing one: it records only while _opened is a list


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("fuzzview")
    table = digits_table().slice(0, 120)
    root = base / "data" / "digits"
    published_digits(root, PUBLISHED, table)
    commit_table(root, COMMITTED, table.slice(0, 10))
    broken = commit_table(root, BROKEN, table.slice(0, 60), max_shard_bytes=16 * 1024)
    shard = broken / "shard-000001.tar"
    data = bytearray(shard.read_bytes())
    data[600] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert not validate_version(str(broken), workers=1).ok
    hidden = base / "data" / "hidden"  # a dataset no config names
    published_digits(hidden, HIDDEN_VERSION, table.slice(0, 5))
    (base / "data" / f"{SECRET}.txt").write_text(SECRET)
    (root / "versions" / f"{SECRET}.txt").write_text(SECRET)  # inside the root, but no version
    configs = base / "datasets"
    write_digits_config(configs, "digits", root)
    app = create_app(configs)
    app.dependency_overrides[app.state.user_dependency] = lambda: "tester"
    return {"client": TestClient(app, raise_server_exceptions=False), "base": base, "root": root, "configs": configs}


TRICKY = st.sampled_from([
    "", ".", "..", "...", "../..", "%2e%2e", "%2E%2E%2F", "..%2f..", "/", "//", "\\", "..\\..", "~", "$HOME",
    "digits", "hidden", "LATEST", "latest", PUBLISHED, COMMITTED, BROKEN, HIDDEN_VERSION, "versions", "_published",
    "shard-000000.tar", "shard-000001.tar", "shard-999999.tar", "../hidden", f"../hidden/versions/{HIDDEN_VERSION}",
    f"../../hidden/versions/{HIDDEN_VERSION}/shard-000000.tar", "/etc/passwd", f"{SECRET}.txt", f"../{SECRET}.txt",
    "00000", "00007", "00119", "99999", "a" * 300, "x" * 5000, "\x00", "\n", "ünï", "２０２６", "0x10", "-1",
    "_index/part-000000.parquet", "_manifest.json", "shard-000000.tar/../../x", "gs://bucket/x", "file:///etc/passwd",
])  # fmt: skip
SEGMENT = st.one_of(
    TRICKY, st.text(max_size=30), st.lists(TRICKY | st.text(max_size=5), min_size=2, max_size=4).map("/".join)
)
NUMBER = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from(["", "abc", "1e3", "0x10", "-0", "16 ", "１"]))
QUERY = st.fixed_dictionaries(
    {},
    optional={"n": NUMBER, "mode": st.sampled_from(["first", "random", "key", "", "FIRST", "all"]) | st.text(max_size=8),
              "seed": NUMBER, "shard": SEGMENT, "key": SEGMENT, "page": NUMBER, "per_page": NUMBER},
)  # fmt: skip
ROUTES = [
    "/api/datasets/{name}",
    "/api/datasets/{name}/versions",
    "/api/datasets/{name}/versions/{version}",
    "/api/datasets/{name}/versions/{version}/preview",
    "/api/datasets/{name}/versions/{version}/index",
    "/datasets/{name}",
    "/datasets/{name}/versions/{version}",
]


@st.composite
def requests(draw) -> tuple[str, dict]:
    route = draw(st.sampled_from(ROUTES))
    name = draw(st.one_of(st.just("digits"), st.just("digits"), SEGMENT))
    version = draw(st.one_of(st.sampled_from(["LATEST", PUBLISHED, COMMITTED, BROKEN]), SEGMENT))
    raw = draw(st.booleans())  # as given (slashes and dots reach the router), or percent-encoded whole

    def segment(text: str) -> str:
        return quote(text, safe="/" if raw else "")

    return route.format(name=segment(name), version=segment(version)), {k: str(v) for k, v in draw(QUERY).items()}


def inside(path: str, *folders: Path) -> bool:
    real = os.path.realpath(path)
    return any(real == str(folder) or real.startswith(str(folder) + os.sep) for folder in folders)


def test_fuzzed_routes_answer_200_or_a_4xx_with_a_message_and_never_leave_the_root(world) -> None:
    global _opened
    client, base = world["client"], Path(os.path.realpath(world["base"]))
    root, configs = Path(os.path.realpath(world["root"])), Path(os.path.realpath(world["configs"]))
    counts = {"tried": 0, "ok": 0, "refused": 0}

    @FUZZ
    @given(requests())
    def one(request: tuple[str, dict]) -> None:
        global _opened
        url, query = request
        counts["tried"] += 1
        _opened = []
        start = time.monotonic()
        try:
            response = client.get(url, params=query, follow_redirects=False)
        finally:
            opened, _opened = _opened, None
        assert time.monotonic() - start < SECONDS_PER_REQUEST, url
        assert response.status_code < 500, (url, query, response.status_code, response.text[:500])
        strays = [path for path in opened if inside(path, base) and not inside(path, root, configs)]
        assert not strays, (url, query, strays)
        assert SECRET not in response.text, url
        if response.status_code in (301, 302, 307, 308):  # e.g. a trailing slash dropped: within the app only
            location = response.headers["location"]
            assert (
                location.startswith("http://testserver/") or location.startswith("/") and not location.startswith("//")
            )
            counts["ok"] += 1
            return
        assert response.status_code == 200 or 400 <= response.status_code < 500, (url, response.status_code)
        if response.status_code == 200:
            counts["ok"] += 1
        else:
            counts["refused"] += 1
            if url.startswith("/api"):
                assert response.json().get("detail"), (url, response.text[:300])
            else:
                assert response.text.strip(), url

    one()
    print(f"view routes: {counts}")
    assert counts["tried"] > 0 and counts["ok"] > 0 and counts["refused"] > 0
