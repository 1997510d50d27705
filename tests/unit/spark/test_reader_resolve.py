"""What a read's path names, decided on the driver before any task runs: no Spark needed.

Foreign shards are written by Python's tarfile (another tool's tars); our directories carry the
writer's mark, as the writer leaves them.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from spark_webdataset.dataset.layout import Version
from spark_webdataset.dataset.tree import WRITER_MARK
from spark_webdataset.errors import BadOption, InputError, NotCommitted, TarFormatError
from spark_webdataset.spark.options import ReadOptions
from spark_webdataset.spark.reader import infer_fields, resolve


def foreign_tar(path: Path, samples: dict[str, dict[str, bytes]]) -> str:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for key, members in samples.items():
            for extension, data in members.items():
                info = tarfile.TarInfo(f"{key}.{extension}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.fixture
def shards(tmp_path) -> Path:
    for n in range(3):
        foreign_tar(
            tmp_path / f"part-{n}.tar", {f"s{n}a": {"jpg": b"x", "cls": b"1"}, f"s{n}b": {"jpg": b"y", "txt": b"t"}}
        )
    return tmp_path


def test_a_tar_path_a_directory_of_tars_and_patterns(shards) -> None:
    one = str(shards / "part-1.tar")
    assert resolve(one) == ([one], None)
    assert resolve(str(shards))[0] == [str(shards / f"part-{n}.tar") for n in range(3)]
    assert resolve(str(shards / "part-{0..1}.tar"))[0] == [str(shards / "part-0.tar"), str(shards / "part-1.tar")]
    assert resolve(str(shards / "part-[02].tar"))[0] == [str(shards / "part-0.tar"), str(shards / "part-2.tar")]


def test_what_names_no_shard_is_an_input_error_that_says_which(shards, tmp_path) -> None:
    with pytest.raises(InputError, match=r"part-3\.tar \(from pattern .*part-\{2\.\.3\}\.tar\) does not exist"):
        resolve(str(shards / "part-{2..3}.tar"))
    with pytest.raises(InputError, match="matches no shard"):
        resolve(str(shards / "other-*.tar"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no manifest, LATEST or .tar shards"):
        resolve(str(empty))


def test_our_directory_without_a_manifest_is_not_committed(shards) -> None:
    """Staged or half-overwritten: its tars must not be read as if they were a version."""
    Path(Version.at(str(shards)).mark_uri).write_bytes(WRITER_MARK)
    with pytest.raises(NotCommitted):
        resolve(str(shards))


def test_fields_are_inferred_in_first_seen_order_past_bad_shards_when_asked(shards) -> None:
    bad = shards / "bad.tar"
    bad.write_bytes(b"not a tar header" * 64)
    urls = [str(bad), str(shards / "part-0.tar")]
    assert infer_fields([str(shards / "part-0.tar")]) == ["jpg", "cls", "txt"]
    with pytest.raises(TarFormatError, match="cannot infer the fields") as caught:
        infer_fields(urls)
    assert str(bad) in str(caught.value)
    assert infer_fields(urls, skip_bad_shards=True) == ["jpg", "cls", "txt"]
    with pytest.raises(InputError, match="among 1 .all were bad"):
        infer_fields([str(bad)], skip_bad_shards=True)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"path": "x", "maxShardBytes": "1"}, "unknown read option.*maxshardbytes"),
        ({}, "no path"),
        ({"path": "x", "skipBadShards": "sometimes"}, "skipBadShards"),
    ],
)
def test_read_options_name_what_is_wrong(options: dict, message: str) -> None:
    with pytest.raises(BadOption, match=message):
        ReadOptions.parse(options)
