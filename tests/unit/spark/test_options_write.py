"""The writer's options parsed in spark/options.py, before any task: the build rules spelt as options, and
every check ShardWriter.__init__ repeats (checksum, maxShardBytes, maxSamplesPerShard) refused here first."""

from __future__ import annotations

import re

import pytest

from spark_webdataset.errors import BadOption
from spark_webdataset.spark.options import LATEST_PARENT, WriteOptions


def _parse(**options) -> WriteOptions:
    return WriteOptions.parse({"path": "/tmp/x/versions/v1", **options})


def test_the_build_rules_as_options() -> None:
    assert (_parse(change="Upsert", parent="LATEST").change, _parse(parent="LATEST").parent) == (
        "upsert",
        LATEST_PARENT,
    )
    assert _parse(parent="v0").spark_options()["parent"] == "v0"
    for options, message in [
        ({"change": "upsert"}, "option change='upsert' needs option parent (LATEST or a version id): the version it changes"),
        ({"change": "merge"}, "option change='merge' is not one of append, upsert, delete"),
        ({"parent": "../v0"}, "option parent='../v0' is not LATEST or a version id: "),
    ]:  # fmt: skip
        with pytest.raises(BadOption, match="^" + re.escape(message)):
            _parse(**options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"checksum": "md5"}, "option checksum='md5' must be one of crc32c, sha256"),
        ({"maxShardBytes": "lots"}, "option maxShardBytes='lots' is not a byte size"),
        ({"maxShardBytes": "1000"}, "option maxShardBytes=1000 is smaller than one tar header"),
        ({"maxSamplesPerShard": "0"}, "option maxSamplesPerShard='0' must be at least 1"),
    ],
)
def test_what_the_shard_writer_rechecks_is_refused_at_the_option(options, message) -> None:
    with pytest.raises(BadOption, match="^" + re.escape(message)):
        _parse(**options)
