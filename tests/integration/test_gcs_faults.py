"""gs:// under faults: 503s, resets and lost responses; killed writers leave nothing final."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.airflow.pipeline import publish_step, validate_step
from spark_webdataset.storage import storage_for
from tests.support.fault_proxy import FaultPlan, FaultProxy, FaultRule, gcs_through, use_gcs_endpoint
from tests.support.helpers import failed_task_attempts, spark_submit

pytestmark = pytest.mark.slow


def job_args(source: str, root: str, version: str) -> list[str]:
    return ["--source", source, "--output", root, "--version", version, "--key", "format_string('%05d', id)",
            "--field", "png=image", "--field", "cls=label", "--field", "json=meta", "--max-shard-bytes", "256KiB"]  # fmt: skip


def run_pipeline(source: str, root: str, version: str, endpoint: str, monkeypatch) -> dict:
    done = spark_submit(job_args(source, root, version), "local[2,4]", {"STORAGE_EMULATOR_HOST": endpoint}, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)
    validate_step(root, version, f"{root}/versions/{version}")
    return publish_step(root, version)


def version_bytes(root: str, version: str) -> dict[str, bytes]:
    storage = storage_for(root)
    directory = f"{root}/versions/{version}"
    files = {name: storage.read_bytes(f"{directory}/{name}") for name in storage.list_sizes(directory)}
    for name in ("_manifest.json", "_validation.json", "shardindex.json"):
        document = json.loads(files.pop(name))
        document.pop("run", None)
        document.pop("name", None)
        document.pop("version", None)  # the version URI: clean/ vs faulty/
        document.pop("manifest_sha256", None)  # covers the manifest's run section
        document.get("source", {}).pop("spark_application_id", None)
        for shard in (
            document.get("shards", []) + document.get("sample_index_files", []) if name == "_validation.json" else []
        ):
            shard.pop("identity", None)  # the object's generation: which upload, not which bytes
        files[name] = json.dumps(document, sort_keys=True).encode()
    return files


def test_pipeline_completes_through_faults_with_identical_output(
    spark, bucket, gcs_emulator, digits_source, monkeypatch
) -> None:
    from spark_webdataset.jobs.build import build, parser

    # the baseline in this process's Spark, straight to the emulator; the faulty run is a real spark-submit
    build(spark, parser().parse_args(job_args(digits_source, f"{bucket}/clean", "v")))
    validate_step(f"{bucket}/clean", "v", f"{bucket}/clean/versions/v")
    clean = publish_step(f"{bucket}/clean", "v")
    plan = FaultPlan(rate=0.1, max_faults=15, seconds=300, seed=5)
    proxy = FaultProxy(gcs_emulator.url, plan)
    try:
        faulty = run_pipeline(digits_source, f"{bucket}/faulty", "v", proxy.url, monkeypatch)
    finally:
        proxy.stop()
        # compare on the emulator itself: the variable AND the cached client (a kept-alive
        # connection to the proxy could otherwise still carry, and fault, the reads below)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
        use_gcs_endpoint(gcs_emulator.url)
    print(f"requests {plan.requests}, faults injected {plan.injected}")
    assert all(count > 0 for count in plan.injected.values()), plan.injected
    assert faulty["samples"] == clean["samples"] == 1797
    requests = plan.requests
    assert version_bytes(f"{bucket}/faulty", "v") == version_bytes(f"{bucket}/clean", "v")
    assert plan.requests == requests, "the comparison went through the fault proxy"


def test_writer_killed_mid_upload_leaves_nothing_under_a_final_name(bucket, gcs_emulator, digits_source) -> None:
    root = f"{bucket}/killed"
    storage = storage_for(root)
    # one sample a shard: a task's first batch finishes (uploads) many staged shards, then the task
    # stops with the next upload open and the kill lands mid-upload
    args = ["--source", digits_source, "--output", root, "--version", "v", "--key", "format_string('%06d', id)",
            "--field", "png=image", "--max-samples-per-shard", "1"]  # fmt: skip
    with faults.installed({"task:batch-written": {"action": "sleep", "seconds": 600, "attempts": [0]}}):
        job = spark_submit(args, "local[2,4]", {"STORAGE_EMULATOR_HOST": gcs_emulator.url}, wait=False)
        deadline = time.monotonic() + 240
        try:
            while not any(b.name.endswith(".tar") for b in storage_client_blobs(root)):
                assert job.poll() is None, "the job ended before it was killed"
                assert time.monotonic() < deadline
                time.sleep(0.1)
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    names = [b.name for b in storage_client_blobs(root)]
    # staged objects only, and our writer's mark (the version reads as "not committed")
    assert names and all("/_staging/" in name or name.endswith("/_WEBDATASET") for name in names), names
    assert not storage.exists(f"{root}/versions/v/_manifest.json")


def storage_client_blobs(root: str):
    from spark_webdataset.storage.gcs import client, split

    bucket, prefix = split(root)
    return list(client().list_blobs(bucket, prefix=prefix))


def test_retried_task_on_gcs_keeps_exactly_the_samples(spark, bucket) -> None:
    target = f"{bucket}/retry/versions/v"
    frame = spark.range(0, 300, numPartitions=3).selectExpr("format_string('k%04d', id) AS __key__", "id AS cls")
    writer = frame.write.format("webdataset").option("maxSamplesPerShard", 50)
    with faults.installed({"task:batch-written": {"action": "exit", "partitions": [1], "attempts": [0]}}):
        # Spark's own count: partition 1's first attempt died with its worker, and was retried
        assert failed_task_attempts(spark, lambda: writer.mode("overwrite").save(target)) == 1
    storage = storage_for(target)
    names = sorted(storage.list_sizes(target))
    assert names == ["_WEBDATASET", "_manifest.json"] + [f"shard-{i:06d}.tar" for i in range(6)]
    assert storage.list_dirs(target) == ["_index"]  # the sample index; no staging left
    keys = sorted(r["__key__"] for r in spark.read.format("webdataset").load(target).collect())
    assert keys == [f"k{i:04d}" for i in range(300)]


def test_publish_whose_record_create_and_latest_update_lose_their_responses(spark, bucket, gcs_emulator) -> None:
    """Deterministic lost responses on publish's two conditional writes: both settle by reading back."""
    from spark_webdataset.dataset.publish import advance_latest, publish, read_latest
    from spark_webdataset.dataset.validate import validate_version

    root, version = f"{bucket}/ds", "20261102T000000Z"
    target = f"{root}/versions/{version}"
    spark.range(0, 40, numPartitions=2).selectExpr("format_string('k%03d', id) AS __key__", "id AS cls").write.format(
        "webdataset"
    ).option("maxSamplesPerShard", 10).mode("overwrite").save(target)
    assert validate_version(target).ok
    assert advance_latest(root, "20261101T000000Z") == "20261101T000000Z"  # LATEST exists: publish must update it
    storage = storage_for(root)
    lose_record = FaultRule(
        "drop_after_effect", object=rf"/_published/{version}\.json$", method="POST", precondition="create"
    )
    lose_latest = FaultRule("drop_after_effect", object=r"(^|/)LATEST$", method="POST", precondition="update")
    plan = FaultPlan(rate=0, rules=[lose_record, lose_latest])
    with gcs_through(gcs_emulator.url, plan):
        result = publish(root, version)
    assert (len(lose_record.hits), len(lose_latest.hits)) == (1, 1), (lose_record.hits, lose_latest.hits)
    # our own record, created by this call (not mistaken for someone else's publish), and LATEST moved
    assert not result.already_published
    assert (result.version, result.samples, result.shards, result.latest) == (version, 40, 4, version)
    assert read_latest(root) == version
    record = json.loads(storage.read_bytes(f"{root}/_published/{version}.json"))
    assert (record["version"], record["samples"]) == (version, 40)
    assert publish(root, version).already_published  # and it stays published, once
