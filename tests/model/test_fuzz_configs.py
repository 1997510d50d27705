"""Fuzzing dataset configs and a run's Params (issue 29's fuzzers; airflow/configs.py, airflow/pipeline.py).

A dataset's YAML file (any text: a valid config with fields changed to other values and types,
random text, deep nesting, alias bombs) goes through `load_config`: a DatasetConfigError naming the
file and, per problem, the field and the rule, or a config every later step can use (its source
renders, its root holds no control character, its policy builds). A run's Params (the types the
DAG's Params allow, other values) go through `plan_run`: a typed error or a plan. Time and memory
stay bounded. Derandomized, a few seconds; counts asserted.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import signal
import time

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from spark_webdataset.airflow.configs import DatasetConfig, load_config
from spark_webdataset.airflow.pipeline import plan_run, render_source
from spark_webdataset.dataset.build_rules import CHANGES, ORDERS
from spark_webdataset.errors import DatasetConfigError, WebDatasetError
from spark_webdataset.format.names import control_error, field_error
from tests.model.fuzzing import fuzz_settings
from tests.support.python_memory import PythonPeak

FUZZ = fuzz_settings(200)
SECONDS_PER_INPUT = 5.0
PEAK_BYTES = 64 << 20
VALID = {
    "name": "digits",
    "source": "data/raw/{ds}/*.parquet",
    "root": "data/digits",
    "key": "id",
    "fields": {"png": "image", "cls": "label"},
    "max_shard_bytes": "64MiB",
    "order": "hash",
    "schedule": "@daily",
    "start_date": "2026-01-01",
    "build": {"parent": "LATEST", "change": "append"},
    "retention": {"keep_last": 3, "keep_days": 7, "min_age": "24h"},
    "validation": {"required_fields": ["png"]},
    "timeouts": {"write_shards": "2h"},
    "spark": {"conf": {"spark.executor.memory": "2g"}},
    "tags": ["a"],
}
TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        [
            "",
            " ",
            "..",
            "../x",
            "/",
            "gs://",
            "gs://b/x",
            "${HOME}",
            "${NOPE}",
            "${X:-y}",
            "{ds}",
            "{nope}",
            "{ds:>9999999999}",
            "{ds!r}",
            "{",
            "}",
            "{{",
            "0",
            "-1",
            "1e309",
            "nan",
            "3GiB",
            "0B",
            "LATEST",
            "2026-13-01",
            "24h",
            "-5m",
            "@daily",
            "a\x00b",
            "a\nb",
            "ünï",
            "x" * 300,
            "__key__",
            "TXT",
        ]
    ),
)
SCALAR = st.one_of(TEXT, st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.booleans(), st.none())
VALUE = st.recursive(
    SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8
)


class TookTooLong(Exception):
    """Raised by the alarm in the code under test (neither loader catches every Exception)."""


@contextlib.contextmanager
def within(seconds: float):
    """Fail an input that runs longer than `seconds` (an alias bomb would otherwise hang the suite)."""

    def alarm(signum, frame):
        raise TookTooLong(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def nested(depth: int) -> str:
    return "name: deep\nroot: r\nkey: k\nsource: s\ntags: " + "[" * depth + "]" * depth + "\n"


def alias_bomb(levels: int) -> str:
    lines = ["name: bomb", "root: r", "key: k", "source: s", 'a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines + [f"tags: *a{levels - 1}"]) + "\n"


@st.composite
def documents(draw) -> str:
    kind = draw(st.sampled_from(["changed", "changed", "changed", "text", "extreme"]))
    if kind == "text":
        return draw(st.text(max_size=200))
    if kind == "extreme":
        return draw(st.sampled_from([nested(3000), nested(50), alias_bomb(9), alias_bomb(3), "a: " + "x" * (3 << 20)]))
    document = dict(VALID)
    for name in draw(st.lists(st.sampled_from(sorted(VALID) + ["nope", "fields.png", "build.change"]), max_size=3)):
        if "." in name:
            outer, inner = name.split(".")
            was = document.get(outer)
            document[outer] = {**(was if isinstance(was, dict) else {}), inner: draw(VALUE)}
        elif draw(st.integers(0, 4)) == 0:
            document.pop(name, None)
        else:
            document[name] = draw(VALUE)
    return yaml.safe_dump(document, allow_unicode=draw(st.booleans()))


def usable(config: DatasetConfig) -> None:
    """What every later step takes from a loaded config works."""
    assert control_error(config.root) is None and config.root
    if config.source is not None:
        assert control_error(config.source) is None
        render_source(config.source, datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc), "v1")
    for extension in config.fields:
        assert field_error(extension) is None
    assert all(limit.total_seconds() > 0 for limit in config.timeouts.values())
    if config.retention is not None:
        config.retention.policy()
    assert config.dag_id and config.asset_uri and isinstance(config.field_args, list)


def test_dataset_configs_load_or_name_the_file_the_field_and_the_rule(tmp_path) -> None:
    counts = {"tried": 0, "typed": 0, "loaded": 0}
    numbers = itertools.count()

    @FUZZ
    @given(documents())
    def one(text: str) -> None:
        counts["tried"] += 1
        path = tmp_path / f"ds{next(numbers)}.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        measured = PythonPeak().__enter__()
        start = time.monotonic()
        try:
            with within(SECONDS_PER_INPUT):
                config = load_config(path, {"HOME": "/home/x"})
        except DatasetConfigError as error:
            counts["typed"] += 1
            assert error.path == path and str(error).startswith(str(path)) and error.problems
            assert all((name is None or isinstance(name, str)) and rule for name, rule in error.problems)
            return
        except (RecursionError, TookTooLong) as error:  # a traceback too deep for pytest to print: say it short
            raise AssertionError(f"{type(error).__name__} in load_config: {text[:100]!r}") from None
        finally:
            measured.__exit__(None, None, None)
            assert time.monotonic() - start < SECONDS_PER_INPUT, text[:200]
            assert measured.peak < PEAK_BYTES, (measured.peak, text[:200])
        counts["loaded"] += 1
        usable(config)

    one()
    print(f"configs: {counts}")
    assert counts["tried"] > 0 and counts["typed"] > 0 and counts["loaded"] > 0


PARAM_TEXT = st.one_of(st.none(), TEXT)
PARAMS = st.fixed_dictionaries(
    {
        "source": st.one_of(PARAM_TEXT, st.sampled_from(["{", "{}", "{;}", "{ds:>99}", "{nope}", "x/{ds}/{version}"])),
        "source_table": st.one_of(st.none(), st.just(""), TEXT),
        "source_format": TEXT,
        "key": TEXT,
        "fields": st.lists(TEXT, max_size=3),
        "max_shard_bytes": st.one_of(st.sampled_from(["64MiB", "1GiB", "3000000"]), TEXT),  # plan checks it now
        "max_samples_per_shard": st.one_of(st.none(), st.integers(1, 2**40)),
        "order": st.sampled_from(ORDERS),
        "parent": PARAM_TEXT,
        "change": st.sampled_from(CHANGES),
        "version": PARAM_TEXT,
    },
    optional={"keep_last": st.one_of(st.none(), st.integers(-2, 10)), "keep_days": st.one_of(st.none(), st.floats(-1, 1e9)),
              "output_root": PARAM_TEXT},
)  # fmt: skip


def test_a_runs_params_plan_or_raise_a_typed_error(tmp_path) -> None:
    counts = {"tried": 0, "typed": 0, "planned": 0}
    root = str(tmp_path / "root")

    @FUZZ
    @given(PARAMS, st.booleans())
    def one(params: dict, with_retention: bool) -> None:
        counts["tried"] += 1
        retention = {"keep_last": 2, "keep_days": None, "min_age": 3600.0} if with_retention else None
        moment = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
        start = time.monotonic()
        try:
            with within(SECONDS_PER_INPUT):
                planned = plan_run(params, moment, moment, root, None, retention)
        except WebDatasetError:
            counts["typed"] += 1
            return
        finally:
            assert time.monotonic() - start < SECONDS_PER_INPUT
        counts["planned"] += 1
        assert all(isinstance(arg, str) for arg in planned["job_args"])
        assert planned["root"] == root and planned["version_uri"].startswith(root)

    one()
    print(f"params: {counts}")
    assert counts["tried"] > 0 and counts["typed"] > 0 and counts["planned"] > 0


@pytest.mark.parametrize("source", ["{", "{}", "{;}", "{ds:>99999999999}", "{nope}"])
def test_a_source_param_with_bad_braces_is_a_typed_error(tmp_path, source) -> None:
    params = {"source": source, "source_table": None, "source_format": "parquet", "key": "id", "fields": [],
              "max_shard_bytes": "64MiB", "max_samples_per_shard": None, "order": "hash", "parent": None,
              "change": "append", "version": None}  # fmt: skip
    moment = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
    with pytest.raises(WebDatasetError), within(SECONDS_PER_INPUT):
        plan_run(params, moment, moment, str(tmp_path / "root"), None, None)
