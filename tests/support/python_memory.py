"""The peak of Python-side allocations while a block runs (tracemalloc), safe with native threads.

tracemalloc is started once and stopped only when a test module is done (tests/conftest.py):
`tracemalloc.stop()` while a thread that does not hold the GIL tracks or frees an allocation
(numpy's and Arrow's do) crashes CPython 3.11 with a segfault (python/cpython#128679, fixed in
3.12.9 and 3.13.2 only). A test worker died that way right after a `stop()` that followed a read;
each measurement resets the peak instead. Left on, tracing made every later test's Python 2-5x
slower (the promise machine 56 s -> 103 s): between modules no test's thread is working.
"""

from __future__ import annotations

import tracemalloc
from types import TracebackType


class PythonPeak:
    """`with PythonPeak() as measured: ...`, then `measured.peak`: the most bytes allocated (and still
    held at that moment) above what was held on entry."""

    peak: int = 0

    def __enter__(self) -> PythonPeak:
        if not tracemalloc.is_tracing():
            tracemalloc.start()
        tracemalloc.reset_peak()
        self._held, _ = tracemalloc.get_traced_memory()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        _, peak = tracemalloc.get_traced_memory()
        self.peak = max(0, peak - self._held)


def stop_tracing() -> None:
    """Stop tracemalloc if a PythonPeak started it (at the end of a test module: see above)."""
    if tracemalloc.is_tracing():
        tracemalloc.stop()
