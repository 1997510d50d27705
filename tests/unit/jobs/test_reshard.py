"""The reshard job without Spark: bad arguments exit 2 before any Spark session starts.
With Spark: tests/integration/test_reshard.py.
"""

from __future__ import annotations

import pytest


def test_reshard_main_exit_2_for_bad_input(tmp_path, capsys) -> None:
    from spark_webdataset.jobs.reshard import main

    # a bad version id is refused before any Spark session starts
    assert main(["--input", str(tmp_path), "--output", str(tmp_path), "--version", "../x"]) == 2
    assert "reshard: error:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--input", str(tmp_path), "--output", str(tmp_path), "--version", "r", "--order", "random"])
    assert exited.value.code == 2
    assert not (tmp_path / "versions").exists()
