"""The build job without Spark: how many partitions fill the shards, and the arguments it refuses
(exit 2) before any Spark session starts. With Spark: tests/integration/test_build_job.py.
"""

from __future__ import annotations

import pytest

from spark_webdataset.jobs.build import plan_partitions


def test_partition_plan_fills_shards() -> None:
    assert plan_partitions(1000, 10_000, 3 * 1024**3, None) == 1
    assert plan_partitions(10, 95 * 2**20, 10 * 2**20, None) == 11
    assert plan_partitions(10_000, 1000, 2**30, 100) == 112


def test_build_job_main_exit_2_for_bad_input(tmp_path, capsys) -> None:
    from spark_webdataset.jobs.build import main

    common = ["--source", str(tmp_path / "src"), "--output", str(tmp_path), "--key", "id"]
    assert main([*common, "--version", "a/b"]) == 2  # refused before any Spark session starts
    err = capsys.readouterr().err
    assert err.startswith("build_webdataset: error:") and "'a/b'" in err
    with pytest.raises(SystemExit) as exited:
        main([*common, "--version", "v", "--order", "random"])
    assert exited.value.code == 2
    with pytest.raises(SystemExit) as exited:
        main(["--output", str(tmp_path), "--version", "v", "--key", "id"])  # neither --source nor --source-table
    assert exited.value.code == 2
    assert not (tmp_path / "versions").exists()
