"""The versioning promise as a plain-Python model: what every version of one root holds.

No storage, no product code: the state machine (test_promise_machine.py) asks the model what a call
must do (succeed, and what the version then holds; or fail, with which kind of typed error) and
checks the product against it after every step. The rules are DESIGN.md's ("The versioning
promise", "Versions that cost what changed", "Change commits detect conflicts", "Paths are checked
before anything is created", retention): where the design leaves a choice open the model says
`EITHER`, and the machine then only asks for a typed error or the model's content.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

Sample = dict[str, bytes]  # field name -> bytes ("txt" always, "bin" unless null)
Content = dict[str, Sample]  # key -> sample

# kinds of outcome the model predicts
OK, ERROR, EITHER = "ok", "error", "either"

# the errors' families by name (the machine maps them to spark_webdataset.errors classes)
SEALED = "VersionSealed"
INPUT = "InputError"  # bad option, key, field, id, duplicate key
CONFLICT = "ConcurrentCommit"
REFUSED = "PublishRefused"
RETENTION = "RetentionRefused"
ANY = "WebDatasetError"

HOSTILE_IDS = ["..", "a/b", "../x", "v\uff11", "v\u0430", ".hidden", "v1/..", "-v", "v" * 129, " v1", "v1\n"]
HOSTILE_KEYS = ["a\nb", "k\x01", "k\x7f", "k\r"]


@dataclass
class Outcome:
    kind: str  # OK, ERROR or EITHER
    error: str = ANY  # the family expected when it fails
    why: str = ""


@dataclass
class VersionState:
    content: Content | None = None  # committed content; None: nothing committed (or removed by gc)
    parent: str | None = None  # the published version its content was built on
    bin_type: str = "binary"  # the `bin` field's type: types are part of a chain's schema
    commits: int = 0  # each commit bumps it: a validation report is for one commit
    validated: tuple[int, bool] | None = None  # (commits, ok) of the last report written under it
    published: bool = False
    logical_date: str | None = None
    retired: bool = False  # retired by gc: never visible, never written, never published again
    deps: frozenset[tuple[str, str]] = frozenset()  # (version, file) its reads need (from its manifest)
    stray_job: bool = False  # a killed committer's staging may be there: not provably dead, so gc may keep it

    @property
    def committed(self) -> bool:
        return self.content is not None

    @property
    def live(self) -> bool:
        """Published and not retired: readable at ROOT/versions/ID and by the promise immutable."""
        return self.published and not self.retired


def natural(version: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|\D+", version))


@dataclass
class PromiseModel:
    versions: dict[str, VersionState] = field(default_factory=dict)
    latest: str | None = None
    pins: set[str] = field(default_factory=set)
    tampered: set[tuple[str, str]] = field(default_factory=set)  # (version, file relative to it)
    index_gone: set[str] = field(default_factory=set)  # published versions whose shardindex.json was deleted

    def state(self, version: str) -> VersionState:
        return self.versions.setdefault(version, VersionState())

    # -- what a version's reads and validation must give ------------------------------------------

    def is_tampered(self, version: str) -> bool:
        """A file its reads need was changed by the machine (directly, or in a parent it references)."""
        return bool(self.state(version).deps & self.tampered)

    def chain(self, version: str) -> list[str]:
        out, seen = [], set()
        current = self.state(version).parent
        while current is not None and current not in seen:
            seen.add(current)
            out.append(current)
            current = self.state(current).parent
        return out

    def validate_verdict(self, version: str, require_bin: bool) -> str:
        """OK (exit 0), ERROR (a check fails: exit 1, or a typed error) or EITHER."""
        s = self.state(version)
        if not s.committed:
            return ERROR
        if self.is_tampered(version):
            return ERROR
        if any(self.state(p).retired or self.is_tampered(p) for p in self.chain(version)):
            return EITHER  # a parent's proof is gone or changed: reading the shards may still prove them
        if require_bin and any("bin" not in sample for sample in s.content.values()):
            return ERROR
        return OK

    # -- writes -------------------------------------------------------------------------------------

    def resolve_parent(self, option: str | None) -> tuple[str | None, Outcome | None]:
        if option is None:
            return None, None
        if option == "LATEST":
            return self.latest, None
        if not self.state(option).live:
            return None, Outcome(ERROR, INPUT, f"parent {option} is not published")
        return option, None

    def expect_write(
        self,
        version: str,
        rows: dict[str, tuple[str, bytes | None]],
        *,
        overwrite: bool,
        parent: str | None,
        change: str | None,
        retyped: bool = False,
    ) -> tuple[Outcome, VersionState | None]:
        """What a write job must do, and the version's state after it (None: unchanged)."""
        s = self.state(version)
        if s.live:
            if (
                change in ("upsert", "delete") and parent is None
            ):  # the options are refused before the version is looked at
                return Outcome(ERROR, ANY, "write into a published version with options that are refused first"), None
            return Outcome(ERROR, SEALED, "write into a published version"), None
        if s.retired:  # refused while gc's mark or files are there; a fresh version once all is gone
            outcome, after = self._expect_write(VersionState(), version, rows, overwrite, parent, change, retyped)
            if outcome.kind == OK:
                return Outcome(EITHER, outcome.error, "a retired id"), after
            return Outcome(ERROR, ANY, f"{outcome.why}; or refused as retired while gc's files are there"), None
        outcome, after = self._expect_write(s, version, rows, overwrite, parent, change, retyped)
        if outcome.kind == OK and after is not None and after.parent is not None and self.is_tampered(after.parent):
            return Outcome(EITHER, ANY, "the parent was tampered with"), after
        resolved, _ = self.resolve_parent(parent)
        if outcome.kind == ERROR and resolved is not None and self.is_tampered(resolved):
            # refused either way: reading the tampered parent's index may be what refuses it first
            return Outcome(ERROR, ANY, f"{outcome.why}; and the parent was tampered with"), None
        return outcome, after

    def _expect_write(
        self, s, version, rows, overwrite, parent, change, retyped
    ) -> tuple[Outcome, VersionState | None]:
        if any(re.search(r"[\x00-\x1f\x7f]", key) for key in rows):
            return Outcome(ERROR, INPUT, "a key holds a control character"), None
        if change in ("upsert", "delete") and parent is None:
            return Outcome(ERROR, INPUT, f"change={change} without a parent option"), None
        resolved, refused = self.resolve_parent(parent)
        if refused:
            return refused, None
        if resolved == version:
            return Outcome(ERROR, INPUT, "built on itself"), None
        kind = (change or "append") if resolved is not None else "append"
        if change == "delete" and resolved is None:
            return Outcome(ERROR, INPUT, "delete without a published parent"), None
        existing = None if overwrite or not s.committed else s
        if resolved is None or (existing is not None and existing.parent == resolved):
            base = existing.content if existing is not None else None
            base_parent = existing.parent if existing is not None else None
            base_type = existing.bin_type if existing is not None else None
        elif existing is not None:
            return Outcome(
                ERROR, CONFLICT, f"append to a version built on {existing.parent}, with parent {resolved}"
            ), None
        else:
            parent_state = self.state(resolved)
            base, base_parent, base_type = parent_state.content, resolved, parent_state.bin_type
        new_type = "string" if retyped else "binary"
        if kind != "delete" and base_type is not None and base_type != new_type:
            return Outcome(ERROR, INPUT, f"bin is {base_type} in the base, {new_type} in the write"), None
        base = dict(base or {})
        incoming = {k: ({"txt": t.encode()} | ({"bin": b} if b is not None else {})) for k, (t, b) in rows.items()}
        if kind == "append":
            if set(incoming) & set(base):
                return Outcome(ERROR, INPUT, "append of a key the base holds"), None
            content = base | incoming
        elif kind == "upsert":
            content = base | incoming
        else:
            content = {k: v for k, v in base.items() if k not in incoming}
        after = dataclasses.replace(
            s,
            content=content,
            parent=base_parent,
            bin_type=base_type if kind == "delete" and base_type else new_type,
            commits=s.commits + 1,
        )
        return Outcome(OK), after

    def racing_outcome(self, overwrite: bool, change: str | None) -> Outcome | None:
        """A job whose version moved (another commit landed) between its start and its commit: only a
        plain append rebases (None: ask `expect_write` against the new state)."""
        if overwrite or (change not in (None, "append")):
            return Outcome(ERROR, CONFLICT, "the version moved since the job read its base")
        return None

    # -- publish, LATEST, retention -----------------------------------------------------------------

    def order(self, version: str) -> tuple:
        return (self.state(version).logical_date or "", natural(version))

    def advance_latest(self, version: str) -> None:
        if self.latest is None or self.order(version) > self.order(self.latest):
            self.latest = version

    def expect_publish(self, version: str) -> Outcome:
        s = self.state(version)
        if s.retired:
            return Outcome(ERROR, REFUSED, "retired")
        if s.live:
            return Outcome(OK, why="already published: a no-op")
        if not s.committed:
            return Outcome(ERROR, REFUSED, "nothing committed")
        if s.validated != (s.commits, True):
            return Outcome(ERROR, REFUSED, "no passing validation of this commit")
        if not s.content:
            return Outcome(ERROR, REFUSED, "empty")
        return Outcome(OK)

    def expect_pin(self, version: str) -> Outcome:
        s = self.state(version)
        if s.live or (s.committed and not s.retired):
            return Outcome(OK)
        return Outcome(ERROR, RETENTION, "nothing there to pin")

    def expect_gc(self, keep_last: int, keep_days: float | None, min_age_zero: bool) -> tuple[set[str], set[str]]:
        """(published versions retired, unpublished versions removed)."""
        published = sorted((v for v, s in self.versions.items() if s.live), key=self.order)
        kept = {self.latest} | (self.pins & {v for v, s in self.versions.items() if s.live or s.committed})
        kept |= set(published[-keep_last:])
        if not min_age_zero or (keep_days is not None and keep_days > 0):
            kept |= set(published)  # all were published moments ago
        retired = {v for v in published if v not in kept}
        removed = set()
        if min_age_zero:
            removed = {
                v
                for v, s in self.versions.items()
                if s.committed and not s.published and not s.retired and v not in kept
            }
        return retired, removed

    def apply_gc(self, retired: set[str], removed: set[str]) -> None:
        for v in retired:
            s = self.state(v)
            s.published, s.retired, s.content = False, True, None
        for v in removed:
            self.versions[v] = VersionState()
