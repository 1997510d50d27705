"""The reader's fast path through Spark: a tar it hands over to the exact parser mid-shard reads whole.
The fast path against the exact parser without Spark: tests/unit/format/test_fast_read_path.py.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from tests.support.helpers import tar_by_tarfile


@pytest.mark.slow
def test_spark_reads_a_tar_the_fast_path_hands_over_mid_shard(spark, tmp_path: Path) -> None:
    """Through Spark: plain members, then a PAX long name, then plain again; a typed and a skipped field."""
    long_key = "p" * 120
    members = [(f"k{i:04d}.{f}", b"%d" % i) for i in range(500) for f in ("cls", "txt")]
    members += [(long_key + ".cls", b"42"), ("z.cls", b"7"), ("z.txt", b"zz")]
    (tmp_path / "shard-000000.tar").write_bytes(tar_by_tarfile(members, tarfile.PAX_FORMAT))
    df = spark.read.format("webdataset").schema("__key__ string, cls int").load(str(tmp_path / "shard-000000.tar"))
    got = [(row["__key__"], row["cls"]) for row in df.collect()]
    assert got == [(f"k{i:04d}", i) for i in range(500)] + [(long_key, 42), ("z", 7)]
