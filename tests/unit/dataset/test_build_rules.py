"""The build rules, once (dataset/build_rules.py): change, parent, their combination, order, durations.

Every entry point (options, job, config, Params) takes them from here: the layer tests check each one
still refuses with these words, spelt its own way."""

from __future__ import annotations

import datetime

import pytest

from spark_webdataset.dataset import build_rules
from spark_webdataset.dataset.build_rules import (
    APPEND,
    CHANGES,
    DELETE,
    LATEST,
    ORDERS,
    UPSERT,
    BuildBase,
    Spelling,
    check_change,
    check_change_parent,
    check_order,
    check_parent,
    parse_duration,
    spell_duration,
)  # fmt: skip
from spark_webdataset.errors import BadOption, InputError

OPTION = Spelling("option change", "option parent")


def test_the_change_kinds_and_orders() -> None:
    assert CHANGES == (APPEND, UPSERT, DELETE) == ("append", "upsert", "delete")
    assert ORDERS == ("hash", "key", "source")
    assert [check_change(value) for value in ("append", " Upsert ", "DELETE")] == ["append", "upsert", "delete"]
    with pytest.raises(BadOption, match=r"^option change='merge' is not one of append, upsert, delete$"):
        check_change("merge", OPTION)
    assert check_order("key") == "key"
    with pytest.raises(BadOption, match=r"^--order='random' is not one of hash, key, source$"):
        check_order("random", Spelling(order="--order"))


def test_a_parent_is_latest_or_a_version_id() -> None:
    assert check_parent(LATEST) == "LATEST" and check_parent("2026-12-01") == "2026-12-01"
    assert check_parent(None) is None and check_parent("  ") is None
    for bad in ("../x", "latest/..", "a b"):
        with pytest.raises(BadOption, match=r"^option parent='.*' is not LATEST or a version id: "):
            check_parent(bad, OPTION)


def test_a_change_needs_a_parent_in_one_sentence_spelt_by_the_caller() -> None:
    check_change_parent(APPEND, None)
    check_change_parent(UPSERT, LATEST)
    with pytest.raises(BadOption) as refused:
        check_change_parent(DELETE, None, Spelling("--change", "--parent"))
    assert str(refused.value) == "--change='delete' needs --parent (LATEST or a version id): the version it changes"
    with pytest.raises(BadOption, match=r"the version it changes; write parent: LATEST$"):
        check_change_parent(UPSERT, None, Spelling(fix="; write parent: LATEST"))
    assert BuildBase.checked(None, None) == BuildBase(APPEND, None)
    assert BuildBase.checked("Upsert", "LATEST") == BuildBase(UPSERT, LATEST)
    with pytest.raises(BadOption, match="needs parent"):
        BuildBase.checked("upsert", "")  # a blank parent is none
    assert issubclass(BadOption, InputError) and issubclass(BadOption, ValueError)  # pydantic reports it per field


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), (45, 45), (1.5, 1.5), ("90s", 90), ("30m", 1800), ("24h", 86400), ("1h30m", 5400),
     ("1d", 86400), ("1.5d", 129600), ("2w", 1209600), ("1w2d3h4m5s", 788645), ("1h 30m", 5400),
     (" 24 H ", 86400), ("0s", 0), ("0", 0), (datetime.timedelta(hours=2), 7200)],
)  # fmt: skip
def test_one_duration_grammar(text, seconds) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "h", "2 hours", "-5m", "30m1h", "1h1h", "1.h", "5x", True, None, [], "nan", "inf"]
)
def test_a_duration_outside_the_grammar_names_it(text) -> None:
    with pytest.raises(BadOption, match=r"^--min-age=.* is not a duration: seconds as a number, or amounts with units"):
        parse_duration(text, "--min-age")


def test_duration_bounds() -> None:
    with pytest.raises(BadOption, match=r"^'0s' must be above zero"):
        parse_duration("0s", above_zero=True)
    with pytest.raises(BadOption, match="must be at least zero"):
        parse_duration(-1)
    with pytest.raises(BadOption, match="must be at least zero"):
        parse_duration(float("nan"))
    assert parse_duration("3650d") == build_rules.MAX_DURATION_SECONDS
    with pytest.raises(BadOption, match="more than 3650 days"):
        parse_duration("522w")


def test_a_spelt_duration_reads_back() -> None:
    for seconds in (45, 600, 5400, 21600, 90061):
        assert parse_duration(spell_duration(seconds)) == seconds
    assert (spell_duration(5400), spell_duration(0)) == ("1h30m", "0s")


def test_the_shard_cap_is_parsed_once_named_by_the_caller() -> None:
    from spark_webdataset.dataset.build_rules import parse_max_shard_bytes

    assert parse_max_shard_bytes("3GiB") == 3 << 30 and parse_max_shard_bytes(1 << 20, "--max-shard-bytes") == 1 << 20
    with pytest.raises(BadOption, match=r"^--max-shard-bytes='lots' is not a byte size"):
        parse_max_shard_bytes("lots", "--max-shard-bytes")
    with pytest.raises(
        BadOption, match=r"^option maxShardBytes=512 is smaller than one tar header plus the end-of-archive"
    ):
        parse_max_shard_bytes(512, "option maxShardBytes")
