"""Sealed means sealed, reports included (DESIGN): validate of a sealed or published version writes
nothing under it (the CLI, the Python API and the Airflow step), prints its verdict and writes a
report only where `--report PATH` says; the report's error_count is every error found, however
many it lists; a child's validation holds its parents to their sealed reports' verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import MAX_REPORTED_ERRORS, validate_version
from spark_webdataset.errors import PipelineError
from tests.support import chains
from tests.support.chains import build_chain, commit_version
from tests.support.helpers import run_cli


def _files(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `directory`: its bytes and mtime_ns."""
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def chain(tmp_path, monkeypatch) -> str:
    """v1 published (one shard of 120 samples: more errors than a shard or a report lists), v2
    committed and validated on it."""
    monkeypatch.setattr(chains, "SHARD_BYTES", 1 << 20)
    root = str(tmp_path / "data")
    build_chain(root, ["v1"], per_version=120)
    commit_version(root, "v2", 120, 10, parent="v1")
    assert validate_version(Dataset(root).version("v2").uri, workers=1).ok
    return root


def test_cli_validate_of_a_published_version_writes_nothing_under_it_and_reports_where_told(chain, tmp_path) -> None:
    v1 = Path(chain, "versions", "v1")
    before = _files(v1)
    report_path = tmp_path / "reports" / "v1.json"
    done = run_cli("validate", str(v1), "--require", "jpg", "--quiet", "--report", str(report_path))
    assert done.returncode == 1, done.stderr
    assert "FAILED with" in done.stdout and str(report_path) in done.stdout
    assert _files(v1) == before  # the sealed report (and everything else) untouched
    report = json.loads(report_path.read_text())
    assert report["ok"] is False and report["errors"] and all("jpg" in e["error"] for e in report["errors"])
    # the children still validate against the sealed report, and publish
    assert validate_version(Dataset(chain).version("v2").uri, workers=1).ok
    publish(chain, "v2")
    # a report path inside a sealed version is refused before anything is read or written
    for inside in (v1 / "_validation.json", v1 / "sub" / "report.json", v1 / ".." / "v1" / "r.json"):
        refused = run_cli("validate", str(v1), "--require", "jpg", "--quiet", "--report", str(inside))
        assert refused.returncode == 2 and "VersionSealed" not in refused.stderr and "sealed" in refused.stderr
        assert _files(v1) == before
    for bad in (tmp_path, tmp_path / ("x" * 300) / "r.json"):  # a directory; a name too long to create
        refused = run_cli("validate", str(v1), "--quiet", "--report", str(bad))
        assert refused.returncode == 2 and "--report" in refused.stderr and "Traceback" not in refused.stderr, (
            refused.stderr
        )
    assert _files(v1) == before
    # without --report: the verdict only
    done = run_cli("validate", str(v1), "--require", "jpg", "--quiet")
    assert done.returncode == 1 and "FAILED with" in done.stdout
    assert _files(v1) == before


def test_error_count_is_every_error_found_and_the_report_says_it_lists_only_the_first(chain, tmp_path) -> None:
    report_path = tmp_path / "v1.json"
    done = run_cli(
        "validate", str(Path(chain, "versions", "v1")), "--require", "jpg", "--quiet", "--report", str(report_path)
    )
    assert done.returncode == 1 and "FAILED with 120 error(s)" in done.stdout
    report = json.loads(report_path.read_text())
    assert report["error_count"] == 120  # one missing field per sample, all in one shard
    assert 0 < len(report["errors"]) <= MAX_REPORTED_ERRORS and report["errors_truncated"] is True


def test_python_validate_of_a_sealed_unpublished_version_writes_nothing_under_it(chain, tmp_path) -> None:
    """Publish died between its seal and its record: the version is sealed, not published."""
    commit_version(chain, "v3", 500, 10, parent="v1")
    v3 = Dataset(chain).version("v3")
    assert validate_version(v3.uri, workers=1).ok

    def die() -> None:
        raise RuntimeError("publish killed after sealing")

    faults.install("publish:recording", die)
    try:
        with pytest.raises(RuntimeError):
            publish(chain, "v3")
    finally:
        faults.clear()
    assert v3.is_sealed() and not v3.is_published()
    before = _files(Path(v3.uri))
    report = validate_version(v3.uri, workers=1, require=["jpg"])
    # its 10 samples and the 120 it references from v1 lack jpg (--require opens referenced shards too)
    assert not report.ok and report.error_count == 10 + 120
    assert _files(Path(v3.uri)) == before
    elsewhere = tmp_path / "v3.json"
    validate_version(v3.uri, workers=1, require=["jpg"], report_path=str(elsewhere))
    assert json.loads(elsewhere.read_text())["error_count"] == 10 + 120 and _files(Path(v3.uri)) == before
    publish(chain, "v3")  # on the sealed report it relied on
    assert v3.is_published()


def test_an_unsealed_version_still_gets_its_report_and_a_true_error_count(chain) -> None:
    commit_version(chain, "v4", 600, 12, parent="v1")
    v4 = Dataset(chain).version("v4")
    report = validate_version(v4.uri, workers=1, require=["jpg"])
    written = json.loads(Path(v4.validation_uri).read_text())
    assert written["ok"] is False and written["error_count"] == report.error_count == 12 + 120  # own and v1's
    assert written["errors_truncated"] is True and len(written["errors"]) < written["error_count"]


def test_airflow_validate_step_of_a_sealed_version_writes_nothing_under_it(chain) -> None:
    from spark_webdataset.airflow.pipeline import validate_step

    v1 = Path(chain, "versions", "v1")
    before = _files(v1)
    validate_step(chain, "v1", required_fields=["jpg"])  # published: its validation is reported
    assert _files(v1) == before
    commit_version(chain, "v5", 700, 10, parent="v1")
    v5 = Dataset(chain).version("v5")
    validate_step(chain, "v5")
    faults.install("publish:recording", lambda: (_ for _ in ()).throw(RuntimeError("killed")))
    try:
        with pytest.raises(RuntimeError):
            publish(chain, "v5")
    finally:
        faults.clear()
    before = _files(Path(v5.uri))
    with pytest.raises(PipelineError):
        validate_step(chain, "v5", required_fields=["jpg"])
    assert _files(Path(v5.uri)) == before


@pytest.mark.parametrize("where", ["report", "row"])
def test_a_parent_whose_sealed_report_is_not_ok_fails_the_child_naming_it(chain, where) -> None:
    report_path = Path(chain, "versions", "v1", "_validation.json")
    document = json.loads(report_path.read_text())
    if where == "report":
        document["ok"] = False  # its rows still say ok
    else:
        document["shards"][0]["ok"] = False
    report_path.write_text(json.dumps(document))
    report = validate_version(Dataset(chain).version("v2").uri, workers=1, write_report=False)
    assert not report.ok
    assert any("version v1" in e["error"] and e["shard"] == f"../v1/{chains.shard_name(0)}" for e in report.errors), (
        report.errors
    )


def test_a_report_of_more_errors_than_it_lists_counts_them_all_and_says_so(tmp_path) -> None:
    """120 samples in shards of ~6 (under a shard's own cap), each missing the required field."""
    root = str(tmp_path / "data")
    commit_version(root, "v1", 0, 120)
    report = validate_version(Dataset(root).version("v1").uri, workers=2, require=["jpg"])
    written = json.loads(Path(root, "versions", "v1", "_validation.json").read_text())
    assert written["error_count"] == report.error_count == 120 and len(written["shards"]) > 10
    assert len(written["errors"]) == MAX_REPORTED_ERRORS and written["errors_truncated"] is True
    assert "FAILED with 120 error(s)" in report.summary() and "110 more error(s) not shown" in report.summary()
