"""Change commits detect conflicts (DESIGN.md "Change commits detect conflicts"): an overwrite, upsert
or delete whose base (the manifest the job read when its writer was created on the driver) moved
before it committed fails with ConcurrentCommit, leaving nothing of it; an append rebases.

The writers are the real Spark writer objects driven as Spark drives them (writer created on the
driver, `write()` as a task, `commit()` on the driver), without a JVM: two jobs whose writers were
created before either committed are two jobs running at once, deterministically.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

import spark_webdataset
from spark_webdataset.dataset.layout import Dataset, Version
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import ConcurrentCommit, FieldMismatch
from spark_webdataset.spark.options import WriteOptions
from spark_webdataset.spark.writer import WebDatasetWriter
from tests.support.fenced_committer import SCHEMA, commit_samples, keys

KEYS = StructType([StructField("__key__", StringType())])


def writer(uri: str, overwrite: bool, schema: StructType = SCHEMA, **options: str) -> WebDatasetWriter:
    """A job's writer, created as Spark's driver creates it: it reads the version now (its base)."""
    return WebDatasetWriter(WriteOptions.parse({"path": uri, "maxSamplesPerShard": "10", **options}), schema, overwrite)


def stage(job: WebDatasetWriter, texts: dict[str, str]):
    """One task of the job: the rows staged, its commit message."""
    names = sorted(texts)
    if job.options.change == "delete":
        batch = pa.record_batch([pa.array(names)], names=["__key__"])
    else:
        batch = pa.record_batch([pa.array(names), pa.array([texts[k] for k in names])], names=["__key__", "txt"])
    return job.write(iter([batch]))


def contents(uri: str) -> dict[str, bytes]:
    samples = spark_webdataset.open(uri)
    return {key: samples.get(key)["txt"] for key in samples.keys()}


def staging_left(uri: str) -> list[str]:
    return sorted(str(p.relative_to(uri)) for p in Path(uri, "_staging").rglob("*") if p.is_file())


def parent(tmp_path: Path) -> tuple[str, dict[str, bytes]]:
    """A root with v1 published (p00000..p00029, each 'text of <key>'); v1's samples."""
    root = str(tmp_path / "ds")
    uri = Dataset(root).version("v1").uri
    commit_samples(uri, "p", 30)
    from spark_webdataset.dataset.publish import publish

    assert validate_version(uri).ok
    publish(root, "v1")
    return root, {key: f"text of {key}".encode() for key in keys("p", 30)}


def test_two_overwrite_deletes_at_once_the_second_fails_and_the_first_keeps_its_deletions(tmp_path) -> None:
    root, v1 = parent(tmp_path)
    uri = Dataset(root).version("v2").uri
    first = writer(uri, True, KEYS, parent="v1", change="delete")
    second = writer(uri, True, KEYS, parent="v1", change="delete")  # both read the version before either committed
    first_message = stage(first, {"p00003": "", "p00012": ""})
    second_message = stage(second, {"p00021": ""})
    first.commit([first_message])
    committed = Version.at(uri).storage.read_bytes(Version.at(uri).manifest_uri)
    with pytest.raises(ConcurrentCommit, match=f"job {first.job_id} committed to it") as caught:
        second.commit([second_message])
    assert second.job_id in str(caught.value) and "delete" in str(caught.value)
    second.abort([second_message])  # what Spark does after a failed commit
    assert Version.at(uri).storage.read_bytes(Version.at(uri).manifest_uri) == committed  # byte for byte
    assert contents(uri) == {k: v for k, v in v1.items() if k not in ("p00003", "p00012")}
    assert staging_left(uri) == []
    assert validate_version(uri).ok


@pytest.mark.parametrize("mode", ["overwrite", "append"])
def test_an_upsert_planned_before_another_commit_fails_with_nothing_of_it_visible(tmp_path, mode: str) -> None:
    root, v1 = parent(tmp_path)
    uri = Dataset(root).version("v2").uri
    late = writer(uri, mode == "overwrite", parent="v1", change="upsert")
    late_message = stage(late, {"p00001": "late"})
    early = writer(uri, True, parent="v1", change="upsert")
    early.commit([stage(early, {"p00002": "early", "n00000": "new"})])
    before = {p.name: p.read_bytes() for p in Path(uri).rglob("*") if p.is_file() and "_staging" not in p.parts}
    with pytest.raises(ConcurrentCommit):
        late.commit([late_message])
    after = {p.name: p.read_bytes() for p in Path(uri).rglob("*") if p.is_file() and "_staging" not in p.parts}
    assert after == before
    assert contents(uri) == {**v1, "p00002": b"early", "n00000": b"new"}
    assert staging_left(uri) == []


def test_an_overwrite_planned_before_an_append_landed_fails(tmp_path) -> None:
    uri = str(tmp_path / "v")
    commit_samples(uri, "a", 20)
    late = writer(uri, True)
    late_message = stage(late, {"z00000": "replacement"})
    commit_samples(uri, "b", 5)  # lands after the overwrite read the version
    with pytest.raises(ConcurrentCommit):
        late.commit([late_message])
    assert sorted(contents(uri)) == keys("a", 20) + keys("b", 5)
    assert staging_left(uri) == []


def test_an_overwrite_into_a_fresh_directory_that_another_job_created_meanwhile_fails(tmp_path) -> None:
    uri = str(tmp_path / "v")
    late = writer(uri, True)
    late_message = stage(late, {"z00000": "replacement"})
    commit_samples(uri, "a", 7)
    with pytest.raises(ConcurrentCommit, match="planned against no manifest"):
        late.commit([late_message])
    assert sorted(contents(uri)) == keys("a", 7)


def test_appends_rebase(tmp_path) -> None:
    uri = str(tmp_path / "v")
    commit_samples(uri, "a", 20)
    late = writer(uri, False)
    late_message = stage(late, {"z00000": "later"})
    commit_samples(uri, "b", 5)
    late.commit([late_message])
    assert sorted(contents(uri)) == keys("a", 20) + keys("b", 5) + ["z00000"]
    assert validate_version(uri).ok


def test_a_sequential_overwrite_reads_its_base_after_the_last_commit_and_replaces_it(tmp_path) -> None:
    """Not a conflict: overwrite replaces the version's content (so the docs' day is upsert, then
    delete with mode append)."""
    root, v1 = parent(tmp_path)
    uri = Dataset(root).version("v2").uri
    upsert = writer(uri, True, parent="v1", change="upsert")
    upsert.commit([stage(upsert, {"p00005": "new 5", "n00070": "added"})])
    delete = writer(uri, True, KEYS, parent="v1", change="delete")
    delete.commit([stage(delete, {"p00006": ""})])
    assert contents(uri) == {k: v for k, v in v1.items() if k != "p00006"}  # the overwrite replaced the upsert


def test_the_documented_day_upsert_then_delete_with_append_keeps_the_upsert(tmp_path) -> None:
    """docs/versions.md: the day's upsert with mode overwrite, then its delete with mode append."""
    root, v1 = parent(tmp_path)
    uri = Dataset(root).version("v2").uri
    upsert = writer(uri, True, parent="LATEST", change="upsert")
    upsert.commit([stage(upsert, {"p00005": "new 5", "n00070": "added"})])
    delete = writer(uri, False, KEYS, parent="LATEST", change="delete")
    delete.commit([stage(delete, {"p00006": "", "p00017": ""})])
    wanted = {k: v for k, v in v1.items() if k not in ("p00006", "p00017")}
    assert contents(uri) == {**wanted, "p00005": b"new 5", "n00070": b"added"}
    manifest = Version.at(uri).read_manifest()
    assert [c["change"] for c in manifest.run["changes"]] == ["upsert", "delete"]
    assert sorted(p.name for p in Path(uri).glob("*.tar")) == sorted(s.name for s in manifest.own_shards)
    assert validate_version(uri).ok


def test_the_docs_write_the_days_delete_with_mode_append() -> None:
    text = (Path(__file__).parents[2] / "docs" / "versions.md").read_text()
    example = text[text.index('option("change", "upsert")') :][:400]
    assert '.mode("overwrite")' in example.split("\n")[0]
    delete = example[example.index('option("change", "delete")') :][:120]
    assert 'mode("append")' in delete and 'mode("overwrite")' not in delete


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_field_of_another_type_is_refused_naming_field_and_types(tmp_path, mode: str) -> None:
    root, v1 = parent(tmp_path)
    uri = Dataset(root).version("v2").uri
    numbers = StructType([StructField("__key__", StringType()), StructField("txt", LongType())])
    options = {"parent": "v1", "change": mode} if mode == "upsert" else {"parent": "v1"}
    job = writer(uri, True, numbers, **options)
    batch = pa.record_batch([pa.array(["p00001"]), pa.array([7], pa.int64())], names=["__key__", "txt"])
    message = job.write(iter([batch]))
    with pytest.raises(FieldMismatch) as caught:
        job.commit([message])
    assert "'txt'" in str(caught.value) and "bigint" in str(caught.value) and "string" in str(caught.value)
    assert not Path(uri, "_manifest.json").exists() and staging_left(uri) == []
    assert contents(f"{root}/versions/v1") == v1


def test_on_gcs_two_overwrite_deletes_at_once_the_second_fails(bucket) -> None:
    from spark_webdataset.dataset.publish import publish

    root = f"{bucket}/ds"
    v1 = Dataset(root).version("v1").uri
    commit_samples(v1, "p", 30)
    assert validate_version(v1).ok
    publish(root, "v1")
    uri = Dataset(root).version("v2").uri
    first = writer(uri, True, KEYS, parent="v1", change="delete")
    second = writer(uri, True, KEYS, parent="v1", change="delete")
    first_message, second_message = stage(first, {"p00003": ""}), stage(second, {"p00021": ""})
    first.commit([first_message])
    version = Version.at(uri)
    committed = version.storage.read_bytes(version.manifest_uri)
    with pytest.raises(ConcurrentCommit):
        second.commit([second_message])
    second.abort([second_message])
    assert version.storage.read_bytes(version.manifest_uri) == committed
    assert sorted(contents(uri)) == [k for k in keys("p", 30) if k != "p00003"]
    assert version.storage.crc32c_below(version.staging_uri) == {}
    assert validate_version(uri).ok
