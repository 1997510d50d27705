"""LATEST without Spark: a backfill never moves it back; version ids order naturally.
Validation and publish of Spark-written versions: tests/integration/test_validate_publish.py.
"""

from __future__ import annotations

from pathlib import Path

from spark_webdataset.dataset.publish import advance_latest, read_latest


def test_backfill_never_moves_latest_back(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert advance_latest(root, "20261203T000000Z") == "20261203T000000Z"
    assert advance_latest(root, "20261201T000000Z") == "20261203T000000Z"
    assert read_latest(root) == "20261203T000000Z"


def test_version_order_is_natural() -> None:
    from spark_webdataset.dataset.ordering import version_order

    assert version_order("v10") > version_order("v9")
    assert version_order("20261202T000000Z") > version_order("20261201T235959Z")
