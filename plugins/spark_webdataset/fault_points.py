"""Fault points: named steps of the product where a test can make the process fail or freeze.

Part of the product, not of the tests (as FoundationDB's BUGGIFY is of its
server): the step a test breaks is the step users run, unchanged. The
product calls `fault_points.point("commit:journal-written")` at each step (a task's
points with their context: `point("task:batch-written", partition=3,
attempt=0)`); it does nothing unless a test installed an action for that
name. Three ways to install one:

- `install(name, action)`: in this process only; runs once.
- the environment variable `SPARK_WEBDATASET_FAULTS="commit:renamed-one=stop,publish:sealed=exit"`
  in a process the test starts; each runs once in that process.
- `with installed({"task:batch-written": {"action": "raise", "partitions": [0, 1], "attempts": [0]}}):`
  writes the JSON file named by `SPARK_WEBDATASET_FAULTS_FILE`, which every
  process reads: the test's, Spark's JVM and Python workers started long
  before (they inherit the variable, not the file's contents), spark-submit
  children. tests/conftest.py sets the variable before its SparkSession
  starts. A point re-reads the file only when it changed (one stat a call,
  nothing at all when the variable is unset: the product's path). Such a
  fault runs every time its point is reached with a matching context:
  a condition `partitions: [0, 1]` (or `attempts`, or any `<name>s`) holds
  when the point's context `partition` (`<name>`) is in the list, and never
  at a point without that context.

Actions: `stop` freezes the whole process with SIGSTOP at that point (a GC
pause or a stopped VM, resumed by the test's SIGCONT), `exit` kills it
(`os._exit(17)`: a worker or committer that dies leaves its files behind),
`raise` raises `InjectedFault`, `sleep:S` (in the file also
`{"action": "sleep", "seconds": S}`) waits S seconds. Two actions hold one
process until another reached a point, across processes (in the file):
`{"action": "wait", "path": P, "seconds": S}` creates `P.waiting` (the test
knows it is held) and waits until file P exists (at most S seconds, default
60: a bound, not a sleep), and `{"action": "touch",
"path": P}` creates P. A test holds a Spark task (`task:staging-file`) until
the driver's `abort()` returned (`writer:aborted`) this way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

ENV = "SPARK_WEBDATASET_FAULTS"
FILE_ENV = "SPARK_WEBDATASET_FAULTS_FILE"
_SPEC_KEYS = {"action", "seconds", "path"}
WAIT_SECONDS = 60.0


class InjectedFault(RuntimeError):
    """Raised at a fault point by the `raise` action."""


_installed: dict[str, Callable[[], None]] = {}
_from_env: dict[str, str] | None = None


def _action(spec: str, where: str = "injected test fault") -> Callable[[], None]:
    if spec == "stop":
        return lambda: os.kill(os.getpid(), signal.SIGSTOP)
    if spec == "exit":
        return lambda: os._exit(17)
    if spec == "raise":

        def fail() -> None:
            raise InjectedFault(where)

        return fail
    if spec.startswith("sleep:"):
        seconds = float(spec[len("sleep:") :])
        return lambda: time.sleep(seconds)
    if spec.startswith("wait:"):
        bound, path = spec[len("wait:") :].split(":", 1)
        return lambda: _wait_for(path, float(bound), where)
    if spec.startswith("touch:"):
        path = spec[len("touch:") :]
        return lambda: open(path, "a").close()
    raise ValueError(f"{ENV}: unknown fault action {spec!r} (stop, exit, raise, sleep:S, wait:S:PATH, touch:PATH)")


def _wait_for(path: str, seconds: float, where: str) -> None:
    """Until another process creates `path`; InjectedFault after `seconds` (a test that never
    released its hold fails, it does not hang)."""
    open(path + ".waiting", "a").close()
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise InjectedFault(f"{where}: {path} did not appear within {seconds:.0f} s")
        time.sleep(0.01)


def _environment() -> dict[str, str]:
    global _from_env
    if _from_env is None:
        text = os.environ.get(ENV, "")
        _from_env = dict(item.split("=", 1) for item in text.split(",") if item)
    return _from_env


_lock = threading.Lock()
_file_state: tuple[object, dict[str, dict[str, Any]]] = (None, {})


def _from_file(path: str) -> dict[str, dict[str, Any]]:
    """The file's faults; read again only when the file changed (replaced: a new inode)."""
    global _file_state
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return {}
    key = (status.st_ino, status.st_mtime_ns, status.st_size)
    if _file_state[0] != key:
        with _lock:
            with open(path, encoding="utf-8") as stream:
                text = stream.read()
            _file_state = (key, _checked(json.loads(text)) if text.strip() else {})
    return _file_state[1]


def _file_action(spec: Mapping[str, Any]) -> str:
    action = str(spec["action"])
    if action == "sleep":
        action = f"sleep:{float(spec.get('seconds', 0))}"
    elif action in ("wait", "touch"):
        if not spec.get("path"):
            raise ValueError(f"fault action {action!r} needs a path")
        bound = f"{float(spec.get('seconds', WAIT_SECONDS))}:" if action == "wait" else ""
        action = f"{action}:{bound}{spec['path']}"
    return action


def _checked(faults: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Faults as the file holds them: name -> {"action": ..., conditions}; an action alone may be a string."""
    checked: dict[str, dict[str, Any]] = {}
    for name, spec in faults.items():
        spec = {"action": spec} if isinstance(spec, str) else dict(spec)
        if "action" not in spec:
            raise ValueError(f"fault {name!r}: no action (stop, exit, raise, sleep)")
        _action(_file_action(spec))  # an unknown action fails when installed, not at the point
        for condition, values in spec.items():
            if condition not in _SPEC_KEYS and (not condition.endswith("s") or not isinstance(values, list)):
                raise ValueError(f"fault {name!r}: condition {condition!r} must be a plural name with a list")
        checked[name] = spec
    return checked


def _matches(spec: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    for condition, values in spec.items():
        if condition in _SPEC_KEYS:
            continue
        if condition[:-1] not in context or context[condition[:-1]] not in values:
            return False
    return True


def point(name: str, **context: Any) -> None:
    """A step was reached: run the action installed for it, if any."""
    action = None
    if _installed or _environment():
        with _lock:
            action = _installed.pop(name, None)
            if action is None and name in _environment():
                action = _action(_environment().pop(name))
    if action is None:
        path = os.environ.get(FILE_ENV)
        if not path:
            return  # the product's path: no file, nothing installed
        spec = _from_file(path).get(name)
        if spec is None or not _matches(spec, context):
            return
        where = f"injected test fault at {name}" + "".join(f", {k} {v}" for k, v in context.items())
        action = _action(_file_action(spec), where)
    action()


def install(name: str, action: str | Callable[[], None]) -> None:
    """In this process only, once."""
    _installed[name] = _action(action) if isinstance(action, str) else action


def clear() -> None:
    _installed.clear()


def _write(path: str, faults: Mapping[str, Any]) -> None:
    """Replaced, never rewritten in place: a reader sees the old file or the new one, whole."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=directory, prefix=".faults-")
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        json.dump(faults, stream)
    os.replace(temp, path)


@contextlib.contextmanager
def installed(faults: Mapping[str, Any]) -> Iterator[None]:
    """These faults, for every process that reads `FILE_ENV`'s file, until the block ends.

    Added to the faults installed already (the file's previous content comes back at the end).
    Without the variable (a test run without tests/conftest.py) it names a new file: this
    process and the processes it starts from now on see it.
    """
    path = os.environ.get(FILE_ENV)
    if not path:
        path = os.path.join(tempfile.mkdtemp(prefix="spark-webdataset-faults-"), "faults.json")
        os.environ[FILE_ENV] = path
    previous = dict(_from_file(path))
    _write(path, {**previous, **_checked(faults)})
    try:
        yield
    finally:
        _write(path, previous)
