"""Hypothesis profiles of the promise machine and the public-API walk.

`ci` (the default): a fixed seed (derandomize) and a budget that keeps the three machines (local
disk; the GCS and S3 emulators, which run a quarter of the examples) near 2 minutes together on 2 idle cores. `soak`: no example limit, a time
budget of SOAK_MINUTES (per machine; `make soak` splits its minutes between local disk, GCS and S3), a random seed.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True, report_multiple_bugs=False)

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    max_examples=int(os.environ.get("PROMISE_MACHINE_EXAMPLES", "16")),
    stateful_step_count=int(os.environ.get("PROMISE_MACHINE_STEPS", "30")),
    **_COMMON,
)
settings.register_profile(
    "soak",
    derandomize=False,
    database=None,
    max_examples=10**9,
    stateful_step_count=50,
    **_COMMON,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

if settings.default.derandomize:
    # Hypothesis has no public setting for how long shrinking may take (its engine stops after
    # MAX_SHRINKING_SECONDS, 5 minutes): a failing CI run reports a shorter, still replayable case
    # (its @reproduce_failure blob) within its budget. The soak keeps the engine's own limit.
    from hypothesis.internal.conjecture import engine

    engine.MAX_SHRINKING_SECONDS = int(os.environ.get("PROMISE_MACHINE_SHRINK_SECONDS", "60"))
