"""s3:// through the build job (spark-submit, its own JVM and Python workers, which find the S3 server
through the inherited AWS_* environment): a run that publishes, and a writer killed mid-upload that
leaves nothing under a final name."""

from __future__ import annotations

import os
import signal
import time

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.airflow.pipeline import publish_step, validate_step
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.storage import storage_for
from tests.integration.test_gcs_faults import job_args
from tests.support.helpers import spark_submit

pytestmark = pytest.mark.slow


def test_the_build_job_writes_and_the_pipeline_publishes_on_s3(s3_bucket, digits_source) -> None:
    root = f"{s3_bucket}/built"
    done = spark_submit(job_args(digits_source, root, "v1"), "local[2,4]", timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    validate_step(root, "v1", f"{root}/versions/v1")
    publish_step(root, "v1")
    version = Dataset(root).version("v1")
    assert version.is_published() and version.read_manifest().samples == 1797


def test_writer_killed_mid_upload_leaves_nothing_under_a_final_name_on_s3(s3_bucket, digits_source) -> None:
    root = f"{s3_bucket}/killed"
    storage = storage_for(root)

    def names() -> list[str]:
        return sorted(storage.crc32c_below(root) or {})

    # one sample a shard: a task's first batch stages many shards, then the task sleeps with the next
    # upload open, and the kill lands there
    args = ["--source", digits_source, "--output", root, "--version", "v", "--key", "format_string('%06d', id)",
            "--field", "png=image", "--max-samples-per-shard", "1"]  # fmt: skip
    with faults.installed({"task:batch-written": {"action": "sleep", "seconds": 600, "attempts": [0]}}):
        job = spark_submit(args, "local[2,4]", wait=False)
        deadline = time.monotonic() + 240
        try:
            while not any(name.endswith(".tar") for name in names()):
                assert job.poll() is None, "the job ended before it was killed"
                assert time.monotonic() < deadline
                time.sleep(0.1)
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    left = names()
    assert left and all("/_staging/" in name or name.endswith("/_WEBDATASET") for name in left), left
    assert not storage.exists(f"{root}/versions/v/_manifest.json")
