"""The versioning promise, model-checked: a Hypothesis state machine over the public API and CLI.

Rules write (overwrite, append, upsert, delete against a parent, `parent=LATEST`), publish,
validate (with and without `--require`), gc, pin/unpin, `latest --set`, read through every reader,
tamper with published files, race a second writer and freeze or kill a committer at a named fault
point. `promise_model.PromiseModel` says what every version holds; after every step the machine
checks (see `_check_invariants`): each version reads exactly its model content through `open()`,
each published one also through webdataset and wids (from its `shardindex.json`); a tampered one
fails with a typed error or returns the model's bytes, never others; published directories do not
change; LATEST and the publish records are the model's; nothing outside the root changed; and no
public call let an exception outside `WebDatasetError` escape (every call goes through `_call`).

Most writes take the data source's own task and commit path without Spark (committer.py: the real
commit code, milliseconds); the Spark writer and reader run in a few rules, rarely. CI (`make test`): a fixed seed
and budget (tests/model/conftest.py's `ci` profile); `make soak SOAK_MINUTES=30`: the `soak` profile.
A failure prints the shrunk step list and a `@reproduce_failure` line.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from hypothesis import reject, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import spark_webdataset
from spark_webdataset import errors
from spark_webdataset.cli import main as cli_main
from spark_webdataset.errors import WebDatasetError, from_spark
from tests.model import committer
from tests.model.promise_model import (
    EITHER,
    ERROR,
    HOSTILE_IDS,
    HOSTILE_KEYS,
    OK,
    Outcome,
    PromiseModel,
)  # fmt: skip
from tests.model.storage_env import GcsEnv, LocalEnv, S3Env

IDS = ["v1", "v2", "v3", "v4", "v5"]
KEYS = [f"k{i:02d}" for i in range(14)]
DATES = ["2026-01-01", "2026-02-01", "2026-03-01", "2026-04-01"]
FAULT_STEPS = {  # named fault point -> the committer's samples are committed in the end (decided)
    "commit:manifest-read": False,
    "commit:planned": False,
    "commit:journal-written": True,
    "commit:renamed-one": True,
    "commit:renamed": True,
}
LEASE = 1.0  # the frozen or killed committer's lease: the next writer waits this long to take over
# 1 in N steps of the Spark rules runs a Spark job (they are seconds each); PROMISE_MACHINE_SPARK_ODDS=1: every one

SPARK_ODDS = int(os.environ.get("PROMISE_MACHINE_SPARK_ODDS", "12"))
STATS = {"steps": 0, "examples": 0, "spark_jobs": 0, "subprocesses": 0}

texts = st.text(alphabet="abcxyz \u00e9\u4e2d", min_size=0, max_size=6)
blobs = st.one_of(st.none(), st.binary(min_size=0, max_size=40))
row_sets = st.dictionaries(st.sampled_from(KEYS), st.tuples(texts, blobs), min_size=1, max_size=6)


def _without_tombstones(env, tree: dict[str, str]) -> dict[str, str]:
    """The tree but jobs' staging (`versions/V/_staging/...`), which no reader sees: a writer removes a
    dead job's staging when it starts, and a job Spark aborts leaves its lease saying aborted while its
    sibling tasks may still run, so that they find the job ended (the next writer, publish or gc
    removes it at once)."""
    return {path: digest for path, digest in tree.items() if "/_staging/" not in f"/{path}"}


class Untyped(AssertionError):
    """A public call let an exception outside the WebDatasetError hierarchy escape."""


class PromiseBroken(AssertionError):
    """The product did something the model of the promise forbids."""


# Checks (by tag) to let pass while the bugs they found are open: PROMISE_MACHINE_TOLERATE=leftover-dir,...
# (explore past a known failure; a check whose failure makes the model lose track rejects the example).
TOLERATE = set(filter(None, os.environ.get("PROMISE_MACHINE_TOLERATE", "").split(",")))
TOLERATED: collections.Counter = collections.Counter()


def broken(tag: str, diverged: bool, message: str) -> None:
    if tag in TOLERATE:
        TOLERATED[tag] += 1
        if diverged:
            reject()  # the model cannot follow the product from here: discard this example
        return None
    raise PromiseBroken(f"[{tag}] {message}")


def _call(name: str, fn, *args, **kwargs):
    """(result, None) or (None, typed error); anything else is a failure naming the call."""
    try:
        return fn(*args, **kwargs), None
    except WebDatasetError as error:
        return None, error
    except Exception as error:  # noqa: BLE001 - the point: nothing untyped may escape
        typed = from_spark(error) if type(error).__module__.startswith(("pyspark", "py4j")) else None
        if typed is not None:
            return None, typed
        if "untyped" in TOLERATE:
            TOLERATED["untyped"] += 1
            return None, error
        raise Untyped(f"[untyped] {name}: {type(error).__name__} escaped: {str(error)[:400]}") from error


def _cli(*argv: str) -> tuple[int, str, str]:
    """`spark-webdataset ARGV` in this process: exit code, stdout, stderr; a traceback is a failure."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code, error = _call(f"spark-webdataset {' '.join(argv)}", cli_main, list(argv))
            code = 1 if error is not None else code
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
    if "Traceback" in err.getvalue() and "untyped" not in TOLERATE:
        raise Untyped(f"spark-webdataset {' '.join(argv)} printed a traceback:\n{err.getvalue()[-800:]}")
    return code if code is not None else 0, out.getvalue(), err.getvalue()


def _as_bytes(value) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if hasattr(value, "getvalue"):  # wids hands undecoded members as streams
        return value.getvalue()
    return bytes(value)


def _gopen_gs(url: str, mode: str = "rb", bufsize: int = 8192):
    """webdataset's opener for gs:// and s3:// URLs: the object through our Storage (not gsutil or aws)."""
    from spark_webdataset.storage import storage_for

    return io.BytesIO(storage_for(url).read_bytes(url))


def _payload_byte(shard: bytes, pick: int) -> int:
    """The offset of a payload byte of one of the shard's non-empty members (a flip in padding would
    leave every sample's bytes as they were); the first header's last byte if no member has any."""
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(shard), mode="r:") as archive:
        members = [m for m in archive.getmembers() if m.size > 0]
    if not members:
        return 511
    member = members[pick % len(members)]
    return member.offset_data + (pick // len(members)) % member.size


def _fields(sample: dict) -> dict[str, bytes]:
    return {k: _as_bytes(v) for k, v in sample.items() if not k.startswith("__") and v is not None}


class PromiseMachine(RuleBasedStateMachine):
    env = None  # LocalEnv or GcsEnv, set by the test
    spark = None  # the session fixture's (rules that use it run rarely)

    def __init__(self) -> None:
        super().__init__()
        self.model = PromiseModel()
        self.env.fresh()
        self.sealed: dict[str, dict[str, str]] = {}  # published version -> its directory's files at publish
        self.outside = self._outside_tree()
        self.fresh_prefix = 0
        self.step_no = 0  # steps of this example: Spark runs at fixed ones (replayable, and always some)
        STATS["examples"] += 1

    def teardown(self) -> None:
        self.env.cleanup()

    # -- helpers ----------------------------------------------------------------------------------

    def _outside_tree(self) -> dict[str, str]:
        return {p: d for p, d in self.env.tree("").items() if not p.startswith("ds/")}

    def _uri(self, version: str) -> str:
        return self.env.version_uri(version)

    def _step(self, text: str) -> None:
        STATS["steps"] += 1

    def _expect(self, call: str, outcome: Outcome, error: BaseException | None, tag: str = "") -> bool:
        """Check a call's result against the model's outcome; True when it succeeded."""
        if outcome.kind == OK and error is not None:
            return broken(
                f"{tag}refused", True, f"{call}: the model expects success, got {type(error).__name__}: {error}"
            )
        if outcome.kind == ERROR and error is None:
            return broken(
                f"{tag}accepted", True, f"{call}: the model expects {outcome.error} ({outcome.why}); it succeeded"
            )
        if outcome.kind == EITHER:
            return error is None
        if outcome.kind == ERROR and outcome.error != "WebDatasetError":
            expected = getattr(errors, outcome.error)
            if not isinstance(error, expected):
                return broken(
                    f"{tag}error-type",
                    False,
                    f"{call}: expected {outcome.error} ({outcome.why}), got {type(error).__name__}: {error}",
                )
        return error is None

    def _deps(self, version: str) -> frozenset:
        """The files a committed version's reads need, from its manifest (checked against the model's
        content by every read)."""
        from spark_webdataset.dataset.layout import Version

        manifest = Version.at(self._uri(version)).read_manifest()
        if manifest is None:
            return frozenset()
        deps = {(version, "_manifest.json")}
        if manifest.sample_index:
            deps.add((version, manifest.sample_index))
        deps |= {(shard.version or version, shard.name) for shard in manifest.shards}
        return frozenset(deps)

    def _committed(self, version: str, after) -> None:
        after.stray_job = after.stray_job or self.model.state(version).stray_job
        self.model.versions[version] = after
        after.deps = self._deps(version)

    def _version_tree(self, version: str) -> dict[str, str]:
        return self.env.tree(f"ds/versions/{version}")

    # -- a start deep enough to matter, and a shortcut to publishing ------------------------------

    @initialize(depth=st.integers(0, 2), rows=row_sets)
    def start(self, depth, rows) -> None:
        """Begin from an empty root, one published version, or a chain v1 <- v2 (upsert) published,
        all built through the same public calls the rules make."""
        if depth >= 1:
            self.release("v1", {**rows, "k13": ("first", b"1")}, None, None, DATES[0])
        if depth >= 2:
            self.release("v2", {"k13": ("second", b"2"), "k12": ("new", None)}, "LATEST", "upsert", DATES[1])

    @rule(version=st.sampled_from(IDS), rows=row_sets, parent=st.one_of(st.none(), st.just("LATEST"), st.sampled_from(IDS)),
          change=st.sampled_from([None, "upsert", "delete"]), date=st.sampled_from(DATES))  # fmt: skip
    def release(self, version, rows, parent, change, date) -> None:
        """Write (overwrite), validate and publish in one step, as a DAG run does."""
        self.write(version, rows, True, parent, change, 1)
        self.validate(version, False)
        self.publish(version, date)

    # -- writes -----------------------------------------------------------------------------------

    @rule(
        version=st.sampled_from(IDS), rows=row_sets, overwrite=st.booleans(),
        parent=st.one_of(st.none(), st.just("LATEST"), st.sampled_from(IDS)),
        change=st.sampled_from([None, None, "upsert", "delete"]), retyped=st.integers(0, 19),
    )  # fmt: skip
    def write(self, version, rows, overwrite, parent, change, retyped) -> None:
        """A write job (the data source's task and commit path, without Spark)."""
        if self.spark is not None and not retyped == 0 and self.step_no % SPARK_ODDS == SPARK_ODDS // 2:
            return self.spark_write(
                version, rows, overwrite, parent if parent in (None, "LATEST") else parent, change, 0
            )
        retyped = retyped == 0  # rarely: `bin` as a string
        if retyped:
            rows = {k: (t, None if b is None else b.hex().encode()) for k, (t, b) in rows.items()}
        outcome, after = self.model.expect_write(
            version, rows, overwrite=overwrite, parent=parent, change=change, retyped=retyped
        )
        _, error = _call(f"write {version}", committer.commit, self._uri(version), rows, overwrite=overwrite,
                         parent=parent, change=change, retyped=retyped)  # fmt: skip
        call = f"write {version} overwrite={overwrite} parent={parent} change={change} retyped={retyped} keys={sorted(rows)}"
        tag = "types-" if "bin is" in outcome.why else ("retyped-" if retyped else "")
        if self._expect(call, outcome, error, tag) and after is not None:
            self._committed(version, after)

    @rule(version=st.sampled_from(IDS), key=st.sampled_from(HOSTILE_KEYS))
    def write_hostile_key(self, version, key) -> None:
        """A key with a control character: refused (readers such as wids cannot parse it)."""
        rows = {key: ("x", b"y")}
        outcome, _ = self.model.expect_write(version, rows, overwrite=False, parent=None, change=None)
        before = _without_tombstones(self.env, self.env.tree("ds"))
        _, error = _call(f"write key {key!r}", committer.commit, self._uri(version), rows, overwrite=False)
        self._expect(f"write {version} key {key!r}", outcome, error, "hostile-key-")
        if error is not None and _without_tombstones(self.env, self.env.tree("ds")) != before:
            return broken(
                "refused-write-changed-root", False, f"a refused write of key {key!r} into {version} changed the root"
            )

    @rule(version=st.sampled_from(HOSTILE_IDS), overwrite=st.booleans())
    def write_hostile_id(self, version, overwrite) -> None:
        """`ROOT/versions/<not an id>`: refused before anything is created."""
        before = self.env.tree("")
        _, error = _call(f"write to versions/{version!r}", committer.commit, f"{self.env.root}/versions/{version}",
                         {"k00": ("x", b"y")}, overwrite=overwrite)  # fmt: skip
        if error is None:
            return broken(
                "hostile-id-accepted",
                True,
                f"a write to {self.env.root}/versions/{version!r} was accepted (not a version id)",
            )
        if not isinstance(error, errors.InputError):
            return broken(
                "hostile-id-error-type",
                False,
                f"a write to versions/{version!r}: expected an InputError, got {type(error).__name__}: {error}",
            )
        if self.env.tree("") != before:
            changed = set(self.env.tree("").items()) ^ set(before.items())
            return broken(
                "refused-write-changed-root",
                False,
                f"a refused write to versions/{version!r} changed storage: {sorted(changed)[:6]}",
            )

    @rule(
        version=st.sampled_from(IDS), first=st.tuples(row_sets, st.booleans(), st.sampled_from([None, "upsert", "delete"])),
        second=st.tuples(row_sets, st.booleans(), st.sampled_from([None, "upsert", "delete"])),
        parent=st.one_of(st.none(), st.just("LATEST")),
    )  # fmt: skip
    def race(self, version, first, second, parent) -> None:
        """Job A starts (reads its base) and stages; job B commits into the same version; A commits.
        Only a plain append may rebase; overwrite, upsert and delete fail with ConcurrentCommit."""
        rows_a, overwrite_a, change_a = first
        rows_b, overwrite_b, change_b = second
        expect_a, _ = self.model.expect_write(version, rows_a, overwrite=overwrite_a, parent=parent, change=change_a)
        writer, error = _call("race: job A starts", committer.start, self._uri(version), rows_a,
                              overwrite=overwrite_a, parent=parent, change=change_a)  # fmt: skip
        if error is not None:  # refused at its start: B runs alone
            if expect_a.kind == OK:
                return broken(
                    "race-start",
                    True,
                    f"race: job A refused at its start ({type(error).__name__}: {error}); the model expects success",
                )
            self.write(version, rows_b, overwrite_b, parent, change_b, 1)
            return
        state_before = self.model.state(version)
        self.write(version, rows_b, overwrite_b, parent, change_b, 1)
        # a commit replaces the state (`_committed`); a count would miss B re-creating a retired id at 1
        moved = self.model.state(version) is not state_before
        effective = (
            change_a if self.model.resolve_parent(parent)[0] is not None else None
        )  # no parent: a full build, an append
        outcome = self.model.racing_outcome(overwrite_a, effective) if moved else None
        after = None
        alone, alone_after = self.model.expect_write(
            version, rows_a, overwrite=overwrite_a, parent=parent, change=change_a
        )
        if outcome is None:
            outcome, after = alone, alone_after
        elif alone.kind == ERROR:  # it fails either way: which check speaks first is the product's choice
            outcome = Outcome(ERROR, "WebDatasetError", f"{outcome.why}; and alone: {alone.why}")
        _, error = _call("race: job A commits", committer.finish, writer)
        call = f"race: A (overwrite={overwrite_a}, change={change_a}) committing after B {'moved' if moved else 'left'} {version}"
        if self._expect(call, outcome, error, "race-") and after is not None:
            self._committed(version, after)

    @rule(
        version=st.sampled_from(IDS),
        step=st.sampled_from(sorted(FAULT_STEPS)),
        kill=st.booleans(),
        dice=st.integers(0, 9),
    )
    def frozen_or_killed_committer(self, version, step, kill, dice) -> None:
        """Committer A (a process of its own, lease 1 s) stops (SIGSTOP) or dies at a named fault point;
        B appends, taking the lock over (rolling A forward where A's journal decided it); A resumes."""
        state = self.model.state(version)
        if dice or state.live or state.retired or state.bin_type != "binary":
            return
        self.fresh_prefix += 1
        rows_a = {f"a{self.fresh_prefix:03d}-{i}": (f"a{i}", bytes([i])) for i in range(4)}
        rows_b = {f"b{self.fresh_prefix:03d}-{i}": (f"b{i}", None) for i in range(2)}
        outcome_a, after_a = self.model.expect_write(version, rows_a, overwrite=False, parent=None, change=None)
        if outcome_a.kind != OK:
            return
        STATS["subprocesses"] += 1
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.model.committer", self._uri(version),
             json.dumps({k: [t, b.decode("latin-1")] for k, (t, b) in rows_a.items()}), "0", "-", "-", str(LEASE)],
            env={**os.environ, "SPARK_WEBDATASET_FAULTS": f"{step}={'exit' if kill else 'stop'}"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            self._wait_stopped_or_dead(process, step, kill)
            decided = FAULT_STEPS[step]
            if kill:
                self.model.state(version).stray_job = True
            if decided:
                self._committed(version, after_a)
            self.write(version, rows_b, False, None, None, 1)  # B: the lock taken over, A rolled forward
        finally:
            if not kill:
                os.kill(process.pid, signal.SIGCONT)
            _, stderr = process.communicate(timeout=120)
        if not kill:
            if decided and process.returncode != 0:
                return broken(
                    "frozen-exit",
                    False,
                    f"committer frozen at {step} (decided, finished by B): exit {process.returncode}: {stderr[-500:]}",
                )
            if not decided and (process.returncode != 3 or "Traceback" in stderr):
                return broken("frozen-exit", False, f"committer frozen at {step} (not decided): exit {process.returncode}, "
                                    f"expected 3 with LostCommitLock/ConcurrentCommit: {stderr[-500:]}")  # fmt: skip

    def _wait_stopped_or_dead(self, process: subprocess.Popen, step: str, kill: bool) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if process.poll() is not None:
                if kill and process.returncode == 17:
                    return
                return broken(
                    "fault-process",
                    True,
                    f"committer ended before {step}: {process.returncode} {process.communicate()}",
                )
            if not kill:
                with open(f"/proc/{process.pid}/stat") as stat:
                    if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                        return
            time.sleep(0.02)
        process.kill()
        return broken("fault-process", True, f"committer never reached {step}")

    @rule(
        version=st.sampled_from(IDS), rows=row_sets, overwrite=st.booleans(),
        parent=st.one_of(st.none(), st.just("LATEST")), change=st.sampled_from([None, "upsert", "delete"]),
        dice=st.integers(0, 2 * SPARK_ODDS - 1),
    )  # fmt: skip
    def spark_write(self, version, rows, overwrite, parent, change, dice) -> None:
        """Rarely: the same write as a real Spark job (`df.write.format("webdataset")`)."""
        if dice or self.spark is None:
            return
        STATS["spark_jobs"] += 1
        outcome, after = self.model.expect_write(version, rows, overwrite=overwrite, parent=parent, change=change)

        def job() -> None:
            if change == "delete":
                frame = self.spark.createDataFrame([(k,) for k in rows], "__key__ string")
            else:
                frame = self.spark.createDataFrame(
                    [(k, t, b) for k, (t, b) in rows.items()], "__key__ string, txt string, bin binary"
                )
            writer = (
                frame.coalesce(1)
                .write.format("webdataset")
                .option("maxSamplesPerShard", str(committer.SAMPLES_PER_SHARD))
            )
            for name, value in (("parent", parent), ("change", change)):
                if value is not None:
                    writer = writer.option(name, value)
            writer.mode("overwrite" if overwrite else "append").save(self._uri(version))

        _, error = _call(f"spark write {version}", job)
        if (
            self._expect(
                f"spark write {version} overwrite={overwrite} parent={parent} change={change}", outcome, error, "spark-"
            )
            and after
        ):
            self._committed(version, after)

    # -- validate, publish, LATEST, retention ------------------------------------------------------

    @rule(version=st.sampled_from(IDS), require=st.booleans())
    def validate(self, version, require) -> None:
        verdict = self.model.validate_verdict(version, require)
        args = ["validate", self._uri(version), "--workers", "1", "--quiet"] + (["--require", "bin"] if require else [])
        code, out, err = _cli(*args)
        if verdict == OK and code != 0:
            return broken(
                "validate-verdict", False, f"{' '.join(args)}: the model says valid; exit {code}: {(out + err)[-600:]}"
            )
        if verdict == ERROR and code == 0:
            return broken(
                "validate-verdict",
                False,
                f"{' '.join(args)}: the model says invalid (tampered or a sample without bin); it passed",
            )
        state = self.model.state(version)
        if state.committed and not state.live and not state.retired:  # it wrote its report: publish relies on it
            state.validated = (state.commits, code == 0)

    @rule(version=st.sampled_from(IDS), date=st.sampled_from(DATES))
    def publish(self, version, date) -> None:
        outcome = self.model.expect_publish(version)
        code, out, err = _cli("publish", self.env.root, version, "--logical-date", date)
        error = None if code == 0 else RuntimeError(err.strip()[-400:])
        if outcome.kind == ERROR and code == 0:
            return broken(
                "publish-accepted",
                True,
                f"publish {version}: the model expects a refusal ({outcome.why}); it published: {out}",
            )
        if outcome.kind == OK and code != 0:
            return broken(
                "publish-refused", True, f"publish {version}: the model expects success; exit {code}: {error}"
            )
        if code != 0:
            return
        state = self.model.state(version)
        if not state.published:
            state.published, state.logical_date = True, f"{date}T00:00:00Z"
            self.sealed[version] = self._version_tree(version)
        self.model.advance_latest(version)

    @rule(version=st.sampled_from(IDS))
    def latest_set(self, version) -> None:
        outcome = Outcome(OK) if self.model.state(version).live else Outcome(ERROR, "PublishRefused", "not published")
        code, out, err = _cli("latest", self.env.root, "--set", version, "--by", "machine")
        if (code == 0) != (outcome.kind == OK):
            return broken(
                "latest-set", True, f"latest --set {version}: model {outcome.kind}, exit {code}: {(out + err)[-400:]}"
            )
        if code == 0:
            self.model.latest = version

    @rule(version=st.sampled_from(IDS), on=st.booleans())
    def pin(self, version, on) -> None:
        if on:
            outcome = self.model.expect_pin(version)
            code, out, err = _cli("pin", self.env.root, version, "--by", "machine")
            if (code == 0) != (outcome.kind == OK):
                return broken(
                    "pin",
                    True,
                    f"pin {version}: model {outcome.kind} ({outcome.why}), exit {code}: {(out + err)[-400:]}",
                )
            if code == 0:
                self.model.pins.add(version)
        else:
            code, out, err = _cli("unpin", self.env.root, version)
            if code != 0:
                return broken("unpin", True, f"unpin {version}: exit {code}: {err}")
            self.model.pins.discard(version)

    @rule(keep_last=st.integers(1, 3), keep_days=st.sampled_from([None, 0.0, 1.0]), min_age_zero=st.booleans(),
          dry_run=st.booleans())  # fmt: skip
    def gc(self, keep_last, keep_days, min_age_zero, dry_run) -> None:
        args = ["gc", self.env.root, "--keep-last", str(keep_last), "--json"]
        args += ["--keep-days", str(keep_days)] if keep_days is not None else []
        args += ["--min-age", "0s"] if min_age_zero else []
        args += ["--dry-run"] if dry_run else []
        anything = any(s.committed or s.published or s.retired for s in self.model.versions.values())
        before = self.env.tree("ds") if dry_run else None
        code, out, err = _cli(*args)
        if not anything:
            if code == 0 and self.env.tree("ds"):
                return broken("gc-empty", False, f"{' '.join(args)} on an empty root succeeded and created files")
            return
        if code != 0:
            return broken("gc-failed", True, f"{' '.join(args)}: exit {code}: {(out + err)[-600:]}")
        retired, removed = self.model.expect_gc(keep_last, keep_days, min_age_zero)
        report = json.loads(out)
        said = (set(report.get("retired", [])), set(report.get("removed_unpublished", [])))
        # beyond the model's: what is left of a version retired earlier (freed once no kept version holds
        # it), and directories holding no committed version (leftovers, flagged by the invariant)
        earlier = {v for v, s in self.model.versions.items() if s.retired}
        leftovers = {v for v, s in self.model.versions.items() if not s.committed} | (
            said[1] - set(self.model.versions)
        )
        stray = {v for v in removed if self.model.state(v).stray_job}  # a killed committer's lease: "live" to gc
        if not (retired <= said[0] <= retired | earlier and removed - stray <= said[1] <= removed | leftovers):
            return broken(
                "gc-decision", True, f"{' '.join(args)}: retired/removed {said}, the model says {(retired, removed)}"
            )
        if dry_run:
            if self.env.tree("ds") != before:
                return broken("gc-dry-run", True, f"{' '.join(args)}: a dry run changed the root")
            return
        self.model.apply_gc(retired, removed & said[1])
        for version in retired | removed:
            self.sealed.pop(version, None)

    # -- reads ------------------------------------------------------------------------------------

    @rule(target_root=st.booleans(), version=st.sampled_from(IDS), dice=st.integers(0, SPARK_ODDS - 1))
    def spark_read(self, target_root, version, dice) -> None:
        """Rarely: the Spark reader on the root (LATEST) or on a version."""
        if dice or self.spark is None:
            return
        if target_root:
            version = self.model.latest
            uri = self.env.root
        else:
            uri = self._uri(version)
        state = self.model.state(version) if version else None
        if state is None or not (state.live or (state.committed and not state.retired)):
            return  # the reader on what is not a version: covered by test_public_api_typed
        STATS["spark_jobs"] += 1

        def job():
            frame = self.spark.read.format("webdataset").load(uri)
            columns = [c for c in ("__key__", "txt", "bin") if c in frame.columns]
            return [row.asDict() for row in frame.select(*columns).collect()]

        rows, error = _call(f"spark read {uri}", job)
        self._compare(f"spark read {uri}", version, rows, error, whole=True)

    @rule(version=st.sampled_from(IDS), key=st.sampled_from(KEYS))
    def cli_get(self, version, key) -> None:
        state = self.model.state(version)
        code, out, err = _cli("get", self._uri(version), key)
        if state.committed and not state.retired and not self.model.is_tampered(version):
            want = key in state.content
            if (code == 0) != want:
                return broken(
                    "get",
                    False,
                    f"get {version} {key}: exit {code}, the model {'holds' if want else 'lacks'} it: {err[-300:]}",
                )
            if want and json.loads(out)["key"] != key:
                return broken("get", False, f"get {version} {key} answered {out}")

    def _compare(self, call: str, version: str, rows, error, whole: bool) -> None:
        """Rows read (dicts) against the model: exact when untampered; when tampered, a typed error or
        the model's bytes (a whole read must not come back partial without an error)."""
        expected = self.model.state(version).content or {}
        tampered = self.model.is_tampered(version)
        if error is not None:
            if not tampered:
                return broken(
                    "read-failed",
                    True,
                    f"{call}: {version} is intact; the read failed with {type(error).__name__}: {error}",
                )
            return
        got = {}
        for row in rows:
            key = row["__key__"]
            got[key] = {
                k: (v.encode() if isinstance(v, str) else bytes(v))
                for k, v in row.items()
                if k != "__key__" and v is not None
            }
        if tampered:
            wrong = {k: v for k, v in got.items() if expected.get(k) != v}
            if wrong:
                return broken(
                    "changed-bytes", False, f"{call}: tampered {version} returned changed bytes for {sorted(wrong)[:5]}"
                )
            if whole and set(got) != set(expected):
                return broken(
                    "partial-read",
                    False,
                    f"{call}: tampered {version} returned {len(got)} of {len(expected)} samples without an error",
                )
            return
        if got != expected:
            diff = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
            return broken("read-differs", True, f"{call}: {version} read {len(got)} samples, the model holds {len(expected)}; differ at {diff[:6]}: "
                                f"got {[got.get(k) for k in diff[:2]]}, model {[expected.get(k) for k in diff[:2]]}")  # fmt: skip

    def _read_open(self, uri: str, version: str) -> None:
        expected = self.model.state(version).content or {}
        tampered = self.model.is_tampered(version)
        samples, error = _call(f"open({uri})", spark_webdataset.open, uri)
        if error is not None:
            return self._compare(f"open({uri})", version, None, error, whole=False)
        keys, error = _call(f"open({uri}).keys()", lambda: list(samples.keys()))
        if error is not None:
            return self._compare(f"open({uri}).keys()", version, None, error, whole=False)
        if not tampered and (keys != sorted(expected) or len(samples) != len(expected)):
            return broken("read-keys", True, f"open({uri}): keys {keys}, the model holds {sorted(expected)}")
        rows = []
        for key in keys:
            sample, error = _call(f"open({uri}).get({key!r})", samples.get, key)
            if error is not None:
                self._compare(f"open({uri}).get({key!r})", version, None, error, whole=False)
                continue
            rows.append({"__key__": key, **_fields(sample)})
        self._compare(f"open({uri})", version, rows, None, whole=not tampered)

    def _index_urls(self, version: str) -> list[str] | None:
        data = self.env.read(f"ds/versions/{version}/shardindex.json")
        if data is None:
            return broken("no-shardindex", True, f"published {version} has no shardindex.json")
        urls = []
        for entry in json.loads(data)["shardlist"]:
            url = entry["url"]
            urls.append(
                f"{self.env.root}/versions/{url[3:]}" if url.startswith("../") else f"{self._uri(version)}/{url}"
            )
        return urls

    def _read_webdataset(self, version: str) -> None:
        import importlib

        import webdataset as wds

        gopen = importlib.import_module("webdataset.gopen")

        gopen.gopen_schemes["gs"] = _gopen_gs  # in-process (the suite's other tests use `pipe:spark-webdataset cat`)
        gopen.gopen_schemes["s3"] = _gopen_gs

        urls = self._index_urls(version)

        def read():
            return [{"__key__": s["__key__"], **_fields({k: v for k, v in s.items() if k in ("txt", "bin")})}
                    for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False)]  # fmt: skip

        rows = read()  # a third-party reader: it owes us no typed errors, and reads only intact versions here
        self._compare(f"webdataset {version}", version, rows, None, whole=True)

    def _read_wids(self, version: str) -> None:
        from spark_webdataset.airflow.consumer import wids_through_storage

        with tempfile.TemporaryDirectory(prefix="wids-") as cache:
            dataset = wids_through_storage().ShardListDataset(f"{self._uri(version)}/shardindex.json", cache_dir=cache,
                                                      transformations=[])  # fmt: skip
            try:
                rows = [{"__key__": dataset[i]["__key__"], **_fields({k[1:]: v for k, v in dataset[i].items() if k in (".txt", ".bin")})}
                        for i in range(len(dataset))]  # fmt: skip
            finally:
                dataset.close()
        self._compare(f"wids {version}", version, rows, None, whole=True)

    @rule(version=st.sampled_from(IDS))
    def read_third_party(self, version) -> None:
        """webdataset and wids through a published version's shardindex.json (no knowledge of parents)."""
        state = self.model.state(version)
        if state.live and not self.model.is_tampered(version) and version not in self.model.index_gone:
            self._read_webdataset(version)
            self._read_wids(version)

    # -- tampering ----------------------------------------------------------------------------------

    @rule(version=st.sampled_from(IDS), what=st.sampled_from(["flip", "truncate", "delete", "index-truncate", "index-delete",
                                                               "shardindex-delete"]), pick=st.integers(0, 50))  # fmt: skip
    def tamper(self, version, what, pick) -> None:
        """Change a published version's files behind the product's back (mtime put back locally)."""
        if not self.model.state(version).live:
            return
        prefix = f"ds/versions/{version}"
        files = [f for f in self.env.files(prefix) if (f, version) not in ()]
        if what.startswith("index"):
            candidates = [f for f in files if f.startswith("_index/") and f.endswith(".parquet")]
        elif what == "shardindex-delete":
            candidates = [f for f in files if f == "shardindex.json"]
        else:
            candidates = [f for f in files if f.startswith("shard-") and f.endswith(".tar")]
        candidates = [f for f in candidates if (version, f) not in self.model.tampered]
        if not candidates:
            return
        name = candidates[pick % len(candidates)]
        relative = f"{prefix}/{name}"
        data = self.env.read(relative)
        if what == "flip":
            at = _payload_byte(data, pick)
            data = data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :]
            self.env.write(relative, data)
        elif what in ("truncate", "index-truncate"):
            self.env.write(relative, data[: len(data) // 2])
        else:
            self.env.delete(relative)
        if what == "shardindex-delete":
            self.model.index_gone.add(version)
        else:
            self.model.tampered.add((version, name))
        if version in self.sealed:
            self.sealed[version] = {k: v for k, v in self.sealed[version].items() if k != name}

    # -- after every step -----------------------------------------------------------------------------

    @invariant()
    def promise_holds(self) -> None:
        STATS["steps"] += 1
        self.step_no += 1
        model = self.model
        if self.spark is not None and self.step_no % SPARK_ODDS == 0 and model.latest is not None:
            self.spark_read(True, model.latest, 0)  # every SPARK_ODDS-th step: the Spark reader on the root
        # every committed version reads exactly its content through open() (tampered: typed or exact)
        for version, state in sorted(model.versions.items()):
            if state.committed and not state.retired:
                self._read_open(self._uri(version), version)
        # the root reads its LATEST
        from spark_webdataset.dataset.layout import Dataset

        latest, error = _call("Dataset.read_latest", Dataset(self.env.root).read_latest)
        if error is not None or latest != model.latest:
            return broken("latest", True, f"LATEST is {latest!r} ({error}), the model says {model.latest!r}")
        if model.latest is not None:
            self._read_open(self.env.root, model.latest)
        # the publish records are the model's published versions
        published, error = _call("Dataset.published_ids", Dataset(self.env.root).published_ids)
        if error is not None or set(published or []) != {v for v, s in model.versions.items() if s.live}:
            return broken(
                "records",
                True,
                f"published records {published} ({error}); the model: {sorted(v for v, s in model.versions.items() if s.live)}",
            )
        # a published directory never changes (but for the files the machine tampered with)
        for version, files in self.sealed.items():
            now = {k: v for k, v in self._version_tree(version).items() if (version, k) not in model.tampered}
            now.pop("shardindex.json", None) if version in model.index_gone else None
            if now != files:
                changed = sorted(k for k in set(now) | set(files) if now.get(k) != files.get(k))
                broken("sealed-changed", False, f"published {version} changed after publish: {changed}")
        # no version directory the model does not know of (a failed write or publish leaves none)
        known = {v for v, s in model.versions.items() if s.committed or s.retired}
        present = self.env.dirs("ds/versions")
        if not present <= known:
            broken(
                "leftover-dir",
                False,
                f"version directories {sorted(present - known)} hold no committed version (leftovers)",
            )
        missing = {v for v, s in model.versions.items() if s.committed and not s.retired} - present
        if missing:
            return broken("committed-gone", True, f"committed versions {sorted(missing)} are gone")
        if self._outside_tree() != self.outside:
            return broken("outside-changed", True, "something outside the root changed")


# -- the tests -----------------------------------------------------------------------------------------


@pytest.fixture
def machine_spark(request):
    """The session's Spark (its rules run rarely); PROMISE_MACHINE_SPARK=0: none (those rules skip)."""
    if os.environ.get("PROMISE_MACHINE_SPARK", "1") == "0":
        return None
    return request.getfixturevalue("spark")


def _report(line: str) -> None:
    print(line, file=sys.stderr)
    report = os.environ.get("PROMISE_MACHINE_REPORT")
    if report:
        with open(report, "a") as out:
            out.write(line + "\n")


EXAMPLE_DIVISOR = {"gcs": 4, "s3": 4}  # the ci profile's examples a store gets: max_examples // this


def _run(env, spark) -> None:
    """The machine under the loaded profile; with SOAK_MINUTES, batches of random examples until the
    time is spent, every failure (its shrunk steps) reported and the soak carrying on."""
    PromiseMachine.env, PromiseMachine.spark = env, spark
    before = dict(STATS)
    started = time.monotonic()
    minutes = float(os.environ.get("SOAK_MINUTES", "0"))
    failures = []
    try:
        if not minutes:
            # the emulators' requests make a GCS or S3 (moto) step ~5x a local one: a quarter of the examples
            # keeps the three machines near 2 minutes together in `make test` (at a half, CI 2026-12-05 took
            # s3 79 s and gcs 70 s); the soak (`make soak`) runs every store for as long as it is given
            examples = settings.default.max_examples // EXAMPLE_DIVISOR.get(env.name, 1)
            run_state_machine_as_test(
                PromiseMachine, settings=settings(settings.default, max_examples=max(1, examples))
            )
            return
        while time.monotonic() - started < minutes * 60:
            try:
                run_state_machine_as_test(PromiseMachine, settings=settings(settings.default, max_examples=10))
            except Exception as failure:  # noqa: BLE001 - a soak reports every failure and goes on
                failures.append(failure)
                steps = "\n".join(getattr(failure, "__notes__", []))
                for inner in getattr(failure, "exceptions", ()):  # a FlakyFailure's first and later runs
                    steps += f"\n  sub-exception {type(inner).__name__}: {str(inner)[:800]}"
                _report(
                    f"FAILURE {len(failures)} on {env.name}: {type(failure).__name__}: {str(failure)[:1500]}\n{steps}"
                )
        assert not failures, f"{len(failures)} failures; see the report above"
    finally:
        took = time.monotonic() - started
        _report(
            f"promise machine on {env.name}: {STATS['examples'] - before['examples']} examples, "
            f"{STATS['steps'] - before['steps']} steps, {STATS['spark_jobs'] - before['spark_jobs']} Spark jobs, "
            f"{STATS['subprocesses'] - before['subprocesses']} fault processes, {len(failures)} failures in {took:.0f} s"
            + (f"; tolerated {dict(TOLERATED)}" if TOLERATED else "")
        )


def test_promise_on_local_disk(machine_spark, tmp_path) -> None:
    _run(LocalEnv(str(tmp_path)), machine_spark)


def test_promise_on_gcs(machine_spark, gcs_emulator, bucket) -> None:
    _run(GcsEnv(bucket), machine_spark)


def test_promise_on_s3(machine_spark, s3_bucket) -> None:
    _run(S3Env(s3_bucket), machine_spark)
