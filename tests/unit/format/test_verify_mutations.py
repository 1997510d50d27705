"""Rules of format/verify.py that issue 29 added, each where a one-line bug in it went unseen by the rest of
the suite (issue 29's mutation table re-run: the mutation each test catches is named above it). Real
parts on local disk, without Spark; the Spark reader's: tests/integration/test_mutations_more.py.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.format.verify import MAX_ERRORS_PER_SHARD
from tests.support.webdataset_ui_data import commit_table

# format/verify.py ShardReport.error: `if len(self.errors) < MAX_ERRORS_PER_SHARD` -> `<=`


def test_a_shard_report_lists_exactly_the_first_max_errors_and_counts_them_all(tmp_path: Path) -> None:
    samples = MAX_ERRORS_PER_SHARD + 7
    table = pa.table({"id": list(range(samples)), "txt": [b"x"] * samples})
    version = commit_table(tmp_path / "root", "v1", table, fields=[("txt", "txt", "binary")], max_shard_bytes=1 << 20)
    report = validate_version(str(version), workers=1, require=["jpg"])
    assert not report.ok and report.error_count == samples  # one missing field per sample, one shard
    assert len(report.errors) == MAX_ERRORS_PER_SHARD
    assert [error["key"] for error in report.errors] == [f"{i:05d}" for i in range(MAX_ERRORS_PER_SHARD)]
