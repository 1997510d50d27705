"""The versioning promise without Spark: publish refuses version ids outside the rule.
The promise on every public path: tests/integration/test_versioning.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from spark_webdataset.dataset.publish import publish
from spark_webdataset.errors import (
    InvalidVersionId,
)


@pytest.mark.parametrize("version", ["../x", "a/b", "..", ".hidden", "x" * 129, "a b", "v..1", ""])
def test_publish_refuses_version_ids_outside_the_rule(tmp_path, version) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    with pytest.raises(InvalidVersionId):
        publish(str(root), version)
    result = subprocess.run(
        [sys.executable, "-m", "spark_webdataset.cli", "publish", str(root), version], capture_output=True, text=True
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr and "version id" in result.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["ds"]
