"""Paths are checked before anything is created, with Spark (../shared/DESIGN.md): the data source
refuses `ROOT/versions/..`, a version directory whose id breaks the rule, a target that is a dataset
root (or lies in one elsewhere than ROOT/versions/ID), before a byte is written; the build job hands
Spark absolute paths; a write from a second Python thread needs no second `register`.
Without Spark: tests/unit/dataset/test_paths_checked.py.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from pathlib import Path

import pytest

import spark_webdataset
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.retention import RetentionPolicy, collect
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import InputError, InvalidVersionId, NestedDatasetRoot
from tests.support.helpers import raised, snapshot_files, write

pytestmark = pytest.mark.slow


def frame(spark, start: int, count: int, prefix: str = "k"):
    return spark.range(start, start + count, numPartitions=2).selectExpr(
        f"format_string('{prefix}%05d', id) AS __key__", "format_string('text %d', id) AS txt"
    )


def published_root(spark, root: Path, version: str = "v1", samples: int = 10, prefix: str = "k") -> None:
    uri = Dataset(str(root)).version(version).uri
    write(frame(spark, 0, samples, prefix), uri)
    assert validate_version(uri).ok
    publish(str(root), version)


def test_a_write_to_versions_dotdot_of_a_published_root_is_refused(spark, tmp_path) -> None:
    root = tmp_path / "ds"
    published_root(spark, root)
    before = snapshot_files(root)
    for mode in ("overwrite", "append"):
        for target in (f"{root}/versions/..", f"{root}/versions/../", f"file://{root}/versions/.."):
            error = raised(lambda: write(frame(spark, 100, 5), target, mode=mode))
            assert isinstance(error, InputError) and "'..' path part" in str(error), error
    assert snapshot_files(root) == before  # no _manifest.json, _index/ nor shard in the root
    # the root still works: a read, gc's plan, and a child version built on LATEST
    assert spark.read.format("webdataset").load(str(root)).count() == 10
    assert collect(str(root), RetentionPolicy(1), dry_run=True) is not None
    write(frame(spark, 10, 3), Dataset(str(root)).version("v2").uri, parent="LATEST")
    assert spark.read.format("webdataset").load(Dataset(str(root)).version("v2").uri).count() == 13


@pytest.mark.parametrize(
    "tail, refused",
    [
        ("versions/../x", InputError),
        ("versions/a/b", NestedDatasetRoot),
        ("versions/２０２６", InvalidVersionId),  # full-width digits
        ("versions/v1а", InvalidVersionId),  # a Cyrillic 'а'
        ("versions/.hidden", InvalidVersionId),
        ("", NestedDatasetRoot),  # the root itself
        ("elsewhere", NestedDatasetRoot),
    ],
)
def test_bad_targets_on_an_unpublished_root_are_refused(spark, tmp_path, tail, refused) -> None:
    root = tmp_path / "ds"
    write(frame(spark, 0, 5), Dataset(str(root)).version("v1").uri)  # committed, never published
    before = snapshot_files(tmp_path)
    error = raised(lambda: write(frame(spark, 100, 5), f"{root}/{tail}".rstrip("/")))
    assert isinstance(error, refused), error
    assert snapshot_files(tmp_path) == before


def test_a_write_into_a_version_that_is_a_published_dataset_root_is_refused(spark, tmp_path) -> None:
    outer, inner = tmp_path / "x", tmp_path / "x" / "versions" / "inner"
    published_root(spark, outer, "v1", 10, "outer")
    published_root(spark, tmp_path / "inner", "v1", 4, "inner")
    os.rename(tmp_path / "inner", inner)  # an old writer's work, or a copy made by hand
    before = snapshot_files(tmp_path)
    for mode in ("overwrite", "append"):
        error = raised(lambda: write(frame(spark, 100, 5), str(inner), mode=mode))
        assert isinstance(error, NestedDatasetRoot) and "is itself a dataset root" in str(error), error
    assert snapshot_files(tmp_path) == before
    # both readers still see inner's one sample set
    keys = sorted(
        row["__key__"] for row in spark.read.format("webdataset").load(str(inner)).select("__key__").collect()
    )
    assert keys == sorted(spark_webdataset.open(str(inner)).keys()) == [f"inner{i:05d}" for i in range(4)]


def test_the_build_job_hands_spark_absolute_paths(spark, tmp_path, digits_source, monkeypatch, capsys) -> None:
    """Spark (this test's JVM, like a Spark Connect server) resolves relative paths against its own
    working directory; the job must write where it then looks."""
    from spark_webdataset.jobs.build import main

    jvm_cwd = Path.cwd()
    monkeypatch.chdir(tmp_path)
    strays = []
    try:
        # the reported case (an absolute source, a relative output), then a relative source too
        for version, source in (("v1", digits_source), ("v2", os.path.relpath(digits_source, tmp_path))):
            relative_root = f"rel-{uuid.uuid4().hex[:8]}"
            strays.append(jvm_cwd / relative_root)
            argv = ["--source", source, "--output", relative_root, "--version", version, "--key", "id",
                    "--field", "cls=label", "--max-shard-bytes", "64KiB"]  # fmt: skip
            code = main(argv)
            err = capsys.readouterr().err
            assert code == 0, err
            assert validate_version(str(tmp_path / relative_root / "versions" / version)).ok
    finally:
        found = [stray for stray in strays if stray.exists()]
        for stray in found:
            shutil.rmtree(stray, ignore_errors=True)
    assert not found, f"Spark wrote into its own working directory: {found}"


def test_a_write_and_a_read_from_other_threads_need_no_second_register(spark, tmp_path) -> None:
    """`register(spark)` ran once, in the fixture's thread; each thread below is a new JVM thread."""
    target = str(tmp_path / "threaded")
    results: dict[str, object] = {}

    def run(name, call) -> None:
        try:
            results[name] = call()
        except Exception as error:  # noqa: BLE001 - the assertion below shows it
            results[name] = f"{type(error).__name__}: {str(error)[:300]}"

    writer = threading.Thread(target=run, args=("write", lambda: write(frame(spark, 0, 7), target)))
    writer.start()
    writer.join(300)
    reader = threading.Thread(target=run, args=("read", lambda: spark.read.format("webdataset").load(target).count()))
    reader.start()
    reader.join(300)
    streamed = threading.Thread(target=run, args=("load", lambda: spark.read.load(target, format="webdataset").count()))
    streamed.start()
    streamed.join(300)
    assert results == {"write": None, "read": 7, "load": 7}


def test_the_reshard_job_hands_spark_absolute_paths(spark, tmp_path, monkeypatch, capsys) -> None:
    """As the build job: a relative --input and --output are this job's, not Spark's working directory's."""
    from spark_webdataset.jobs.reshard import main

    source = tmp_path / "src"
    write(frame(spark, 0, 40), str(source))
    jvm_cwd = Path.cwd()
    monkeypatch.chdir(tmp_path)
    relative_root = f"rel-{uuid.uuid4().hex[:8]}"
    try:
        code = main(["--input", "src", "--output", relative_root, "--version", "v1", "--max-shard-bytes", "64KiB"])
        assert code == 0, capsys.readouterr().err
        assert validate_version(str(tmp_path / relative_root / "versions" / "v1")).ok
    finally:
        stray = jvm_cwd / relative_root
        found = stray.exists()
        shutil.rmtree(stray, ignore_errors=True)
    assert not found, f"Spark wrote into its own working directory: {stray}"
