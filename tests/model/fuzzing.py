"""The fuzzers' one setting: a fixed seed (CI runs the same inputs every time), no example database,
no deadline (a per-input time limit is each fuzzer's own), health checks that a slow shared machine
trips off. `FUZZ_EXAMPLES=N` scales every fuzzer's budget (N / 100 of it) for a longer run."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = float(os.environ.get("FUZZ_EXAMPLES", "100")) / 100


def fuzz_settings(examples: int, deadline: int | None = None) -> settings:
    return settings(
        derandomize=True,
        database=None,
        deadline=deadline,
        max_examples=max(1, int(examples * SCALE)),
        suppress_health_check=list(HealthCheck),
    )
