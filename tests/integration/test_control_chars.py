"""Keys and field names hold no control characters (docs/design.md "Paths are checked before anything
is created"; issue 29 item 5).

A key holding a newline used to be written, validated and published; wids then could not read any
sample of its shard (its name regex's `.` stops at the newline). The writer refuses such keys and
fields (InvalidKey / InvalidField naming the key and the rule, nothing visible), validation refuses a
shard holding such a member (both the fast scan and the exact parser), and valid keys still round
trip through wids.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import InvalidField, InvalidKey
from spark_webdataset.format.checksums import Digests
from spark_webdataset.format.verify import check_shard, verify_shard
from tests.support.helpers import raised
from tests.support.tars import version_with

pytestmark = pytest.mark.slow

CONTROL_KEYS = ["a\nb", "a\rb", "a\tb", "x/a\x01b", "a\x7fb", "a\x1fb", "ab\n"]


def write(df, uri: str) -> None:
    df.write.format("webdataset").mode("overwrite").save(uri)


@pytest.mark.parametrize("key", CONTROL_KEYS)
def test_a_spark_write_with_a_control_character_in_a_key_fails_and_leaves_nothing(spark, tmp_path, key) -> None:
    # one partition: a sibling task staging after the abort is item 8's race, tested on its own
    df = spark.createDataFrame([("good", b"x"), (key, b"y")], "__key__ string, bin binary").coalesce(1)
    root = tmp_path / "ds"
    target = root / "versions" / "v1"
    error = raised(lambda: write(df, str(target)))
    assert isinstance(error, InvalidKey), error
    assert repr(key) in str(error) and "control character" in str(error)
    # nothing visible: no version directory, no staging, no mark, no file at all (an empty `versions/`
    # the writer made before its tasks ran may stay: it holds no version)
    assert not target.exists() and not [path for path in root.rglob("*") if not path.is_dir()]


def test_a_spark_write_with_a_control_character_in_a_field_name_fails(spark, tmp_path) -> None:
    df = spark.createDataFrame([("good", b"x")], "__key__ string, `b\nin` binary")
    target = tmp_path / "v"
    error = raised(lambda: write(df, str(target)))
    assert isinstance(error, InvalidField) and "control character" in str(error) and repr("b\nin") in str(error)
    assert not target.exists()


def hand_made_tar(names: list[str]) -> bytes:
    """A tar as another tool writes one: regular USTAR members of these names, 3 bytes each."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"abc"))
    return out.getvalue()


@pytest.mark.parametrize(
    "names",
    [
        ["a.txt", "a\nb.txt", "c.txt"],  # a newline in a key
        ["a.txt", "a\x01b.txt"],  # another C0 character
        ["a.t\x7fxt"],  # DEL in a field
        ["a.t\nxt"],  # a newline in a field
    ],
)
def test_validation_refuses_a_shard_holding_a_control_character_in_a_member_name(names) -> None:
    data = hand_made_tar(names)
    digest = Digests()
    digest.update(data)
    keys = [name.split(".", 1)[0] for name in names]
    expected = {
        "samples": len(keys),
        "bytes": len(data),
        "crc32c": digest.crc32c,
        "first_key": keys[0],
        "last_key": keys[-1],
    }
    for check in (
        lambda: check_shard("x.tar", lambda: io.BytesIO(data), expected),  # the fast scan, then the exact parser
        lambda: verify_shard("x.tar", io.BytesIO(data), expected),  # the exact parser alone
    ):
        report = check()
        assert not report.ok
        assert any("control character" in error["error"] for error in report.errors), report.errors


@pytest.mark.parametrize("names", [["a.txt", "a\nb.txt"], ["a.t\x01xt"]], ids=["key", "field"])
def test_validating_a_version_whose_shard_holds_a_control_character_fails(tmp_path, names) -> None:
    keys = [name.split(".", 1)[0] for name in names]
    directory = version_with(tmp_path / "ds" / "versions" / "v1", hand_made_tar(names), len(keys), keys[0], keys[-1])
    report = validate_version(str(directory), workers=1, write_report=False)
    assert not report.ok
    assert any("control character" in error["error"] for error in report.errors), report.errors


def test_valid_keys_round_trip_through_wids(spark, tmp_path) -> None:
    import wids

    # printable ASCII only: wids reads the USTAR name field alone, so PAX names (non-ASCII) are not for it
    keys = ["a", "dir/b-1", "dir/sub/c_2", "d e", "x/_y", "z~!@#$%^&()"]
    rows = [(key, key.encode() * 3, i) for i, key in enumerate(keys)]
    df = spark.createDataFrame(rows, "__key__ string, bin binary, cls bigint")
    root = tmp_path / "ds"
    df.coalesce(1).write.format("webdataset").mode("overwrite").save(str(root / "versions" / "v1"))
    version = Dataset(str(root)).version("v1")
    assert validate_version(version.uri, workers=1).ok
    publish(str(root), "v1")
    index = Path(version.uri) / "shardindex.json"
    assert json.loads(index.read_text())["shardlist"]
    dataset = wids.ShardListDataset(str(index), transformations=[], cache_dir=str(tmp_path / "cache"))
    seen = {}
    for i in range(len(dataset)):
        sample = dataset[i]
        seen[sample["__key__"]] = (sample[".bin"].read(), int(sample[".cls"].read()))
    assert seen == {key: (key.encode() * 3, i) for i, key in enumerate(keys)}
