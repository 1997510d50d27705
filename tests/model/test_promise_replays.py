"""The promise machine's failures on the code of issue 29, each shrunk by Hypothesis and saved as its
step list: replayed on local disk (and the GCS emulator where it says), every check on after each step.

Each failed on the code before issue 29's fixes, on the check its comment names; each passes now and
keeps the bug from coming back.
"""

from __future__ import annotations

import pytest

from tests.model import test_promise_machine as machine_module
from tests.model.storage_env import GcsEnv, LocalEnv

PromiseMachine = machine_module.PromiseMachine


def replay(env, steps: list[tuple[str, dict]]) -> None:
    """The steps, the machine's invariant checked first and after each; no check tolerated."""
    machine_module.TOLERATE.clear()
    PromiseMachine.env, PromiseMachine.spark = env, None
    machine = PromiseMachine()
    try:
        machine.promise_holds()
        for name, arguments in steps:
            getattr(machine, name)(**arguments)
            machine.promise_holds()
    finally:
        machine.teardown()


@pytest.fixture(params=["local", "gcs"])
def env(request, tmp_path):
    if request.param == "local":
        return LocalEnv(str(tmp_path))
    return GcsEnv(request.getfixturevalue("bucket"))


def test_a_clean_sequence_passes(env) -> None:
    """The replay harness itself: a chain v1 <- v2 (upsert), published, read, gc'd, passes today."""
    replay(env, [
        ("write", dict(version="v1", rows={"k00": ("a", b"x"), "k01": ("b", None), "k02": ("c", b"")}, overwrite=True,
                       parent=None, change=None, retyped=1)),
        ("validate", dict(version="v1", require=False)),
        ("publish", dict(version="v1", date="2026-01-01")),
        ("write", dict(version="v2", rows={"k01": ("B", b"y"), "k05": ("e", None)}, overwrite=True, parent="LATEST",
                       change="upsert", retyped=1)),
        ("validate", dict(version="v2", require=False)),
        ("publish", dict(version="v2", date="2026-02-01")),
        ("read_third_party", dict(version="v2")),
        ("pin", dict(version="v1", on=True)),
        ("gc", dict(keep_last=1, keep_days=None, min_age_zero=True, dry_run=False)),
        ("pin", dict(version="v1", on=False)),
        ("gc", dict(keep_last=1, keep_days=None, min_age_zero=True, dry_run=False)),
    ])  # fmt: skip


# Found by the machine on the code before the fix: issue 29 item 8: `publish ROOT <unwritten id>` leaves
# versions/<id>/ (a lock file) behind
def test_publish_of_an_unwritten_version_leaves_no_directory(tmp_path) -> None:
    """(Local disk only: on GCS the same call leaves no object.)"""
    replay(LocalEnv(str(tmp_path)), [("publish", dict(version="v1", date="2026-01-01"))])


# Found by the machine on the code before the fix: issue 29 item 1: a write to ROOT/versions/.. is accepted
# (it writes into the root)
def test_a_write_to_versions_dotdot_is_refused() -> None:
    import tempfile

    replay(LocalEnv(tempfile.mkdtemp(prefix="replay-")), [("write_hostile_id", dict(version="..", overwrite=False))])


# Found by the machine on the code before the fix: issue 29 item 5: a key holding a newline is accepted
def test_a_key_with_a_newline_is_refused() -> None:
    import tempfile

    replay(LocalEnv(tempfile.mkdtemp(prefix="replay-")), [("write_hostile_key", dict(version="v1", key="a\nb"))])


# Found by the machine on the code before the fix: issue 29 item 7: an overwrite whose version moved since its
# start replaces the other commit's work silently instead of ConcurrentCommit
def test_an_overwrite_racing_another_commit_fails_with_concurrent_commit(env) -> None:
    replay(env, [
        ("race", dict(version="v1", first=({"k00": ("", None)}, True, None), second=({"k00": ("", None)}, False, None),
                      parent=None)),
    ])  # fmt: skip


# Found by the machine on the code before the fix: issue 29 item 9: an append whose field has another type
# (bin: binary after string) is accepted; types are not part of the version's schema
def test_an_append_with_another_type_for_a_field_is_refused(env) -> None:
    replay(env, [
        ("write", dict(version="v1", rows={"k00": ("", None)}, overwrite=True, parent=None, change=None, retyped=0)),
        ("write", dict(version="v1", rows={"k11": ("", None)}, overwrite=False, parent=None, change=None, retyped=1)),
    ])  # fmt: skip


# Found by the machine on the code before the fix: issue 29 items 1/8 on GCS: a write to ROOT/versions/.. is
# refused, but leaves its staging (ROOT/_staging/<job>/...) behind in the root
def test_a_refused_write_to_versions_dotdot_leaves_nothing_on_gcs(bucket) -> None:
    replay(GcsEnv(bucket), [("write_hostile_id", dict(version="..", overwrite=False))])


SIX = {f"k{i:02d}": (f"t{i}", bytes([i]) * 8) for i in range(6)}  # two shards of three


# Found by the machine on the code before the fix: issue 29 item 6: `validate --require` of a published
# version rewrites its _validation.json (a sealed directory changed)
def test_validate_with_require_writes_nothing_under_a_published_version(env) -> None:
    replay(env, [
        ("write", dict(version="v1", rows={**SIX, "k09": ("no bin", None)}, overwrite=True, parent=None, change=None, retyped=1)),
        ("validate", dict(version="v1", require=False)),
        ("publish", dict(version="v1", date="2026-01-01")),
        ("validate", dict(version="v1", require=True)),
    ])  # fmt: skip


# Found by the machine on the code before the fix: issue 29 item 4: a byte flipped in a parent's shard (mtime
# put back) passes the child's default validate
def test_a_child_referencing_a_tampered_parent_shard_fails_validation(tmp_path) -> None:
    replay(LocalEnv(str(tmp_path)), [
        ("write", dict(version="v1", rows=SIX, overwrite=True, parent=None, change=None, retyped=1)),
        ("validate", dict(version="v1", require=False)),
        ("publish", dict(version="v1", date="2026-01-01")),
        ("write", dict(version="v2", rows={"k00": ("new", b"n")}, overwrite=True, parent="LATEST", change="upsert", retyped=1)),
        ("tamper", dict(version="v1", what="flip", pick=1)),  # shard-000001.tar: referenced by v2, not rewritten
        ("validate", dict(version="v2", require=False)),
    ])  # fmt: skip


# Found by the machine on the code before the fix: issue 29 item 4: the Spark reader returns the changed bytes
# of a tampered shard
def test_the_spark_reader_never_returns_tampered_bytes(spark, tmp_path) -> None:
    machine_module.TOLERATE.clear()
    PromiseMachine.env, PromiseMachine.spark = LocalEnv(str(tmp_path)), spark
    machine = PromiseMachine()
    try:
        machine.write(version="v1", rows=SIX, overwrite=True, parent=None, change=None, retyped=1)
        machine.validate(version="v1", require=False)
        machine.publish(version="v1", date="2026-01-01")
        machine.tamper(version="v1", what="flip", pick=1)
        machine.spark_read(target_root=True, version="v1", dice=0)
    finally:
        machine.teardown()


# Found by the machine on the code before the fix: issue 29 item 1 on GCS: ROOT/versions/../x is not
# normalised: the write stages under a literal `..` and fails with ChecksumMismatch ('the upload is corrupt'),
# not an InputError naming the path
def test_a_write_to_versions_dotdot_x_is_an_input_error_on_gcs(bucket) -> None:
    replay(GcsEnv(bucket), [("write_hostile_id", dict(version="../x", overwrite=False))])


# Found by the machine on the code before the fix: issue 29 item 3: a truncated sample index makes
# open().keys() raise ArrowInvalid (untyped, no file named)
def test_a_truncated_sample_index_is_a_typed_error(env) -> None:
    replay(env, [
        ("release", dict(version="v1", rows={"k00": ("", None)}, parent=None, change=None, date="2026-01-01")),
        ("tamper", dict(version="v1", what="index-truncate", pick=0)),
    ])  # fmt: skip


# Found by the machine's CI seed after issue 29's fixes: a committer frozen between its last lease
# check and its journal write (commit:planned) wrote a stale journal once resumed and left it; the next
# write, refused for its key, discarded it: "a refused write ... changed the root"
def test_a_committer_frozen_before_its_journal_leaves_no_stale_journal(env) -> None:
    replay(env, [
        ("frozen_or_killed_committer", dict(version="v4", step="commit:planned", kill=False, dice=0)),
        ("write_hostile_key", dict(version="v4", key="a\nb")),
    ])  # fmt: skip


# Found by the soak (model, not product): a write built on a published parent whose sample index was
# deleted is refused by reading that index (StorageError naming it) before its duplicate key is seen;
# the model now accepts either refusal
def test_a_write_on_a_parent_whose_index_is_gone_is_refused_with_a_typed_error(env) -> None:
    replay(env, [
        ("release", dict(version="v2", rows={"k00": ("a", None)}, parent=None, change=None, date="2026-01-01")),
        ("tamper", dict(version="v2", what="index-delete", pick=0)),
        ("write", dict(version="v4", rows={"k00": ("b", b"x")}, overwrite=True, parent="v2", change=None, retyped=1)),
    ])  # fmt: skip


# Found by the soak after issue 29's fixes: `validate --require bin` of a child passed although a shard
# it references from its parent holds a sample without `bin` (the parent's report proved bytes and rules,
# not a field asked for only now): with --require, referenced shards are opened too
def test_validate_require_checks_the_samples_a_child_references(env) -> None:
    replay(env, [
        ("release", dict(version="v1", rows={"k00": ("no bin", None), "k01": ("bin", b"1")}, parent=None, change=None,
                         date="2026-01-01")),
        ("release", dict(version="v2", rows={"k08": ("bin", b"8")}, parent="LATEST", change=None, date="2026-02-01")),
        ("validate", dict(version="v2", require=True)),
    ])  # fmt: skip


# Found by the soak on GCS (model, not product): a write refused for a duplicate key into an id gc
# retired may be refused as sealed first, while gc's files are there; the model accepts either refusal
def test_a_refused_write_into_a_retired_id_is_a_typed_error(env) -> None:
    replay(env, [
        ("release", dict(version="v1", rows={"k00": ("a", None)}, parent=None, change=None, date="2026-01-01")),
        ("release", dict(version="v5", rows={"k03": ("b", None)}, parent="LATEST", change=None, date="2026-02-01")),
        ("gc", dict(keep_last=1, keep_days=0.0, min_age_zero=True, dry_run=False)),
        ("release", dict(version="v1", rows={"k00": ("c", None)}, parent="LATEST", change=None, date="2026-04-01")),
    ])  # fmt: skip


# The machine's flip now lands in a member's payload (at a fixed offset it often hit an empty member's
# padding, so a mutant open() that skips crc32c went unseen): this sequence fails with that mutant
def test_a_flipped_payload_byte_is_never_read_back(env) -> None:
    replay(env, [
        ("release", dict(version="v1", rows={"k00": ("", b"xyz"), "k01": ("ab", None), "k02": ("", None)}, parent=None,
                         change=None, date="2026-01-01")),
        ("tamper", dict(version="v1", what="flip", pick=1)),
    ])  # fmt: skip


# Found on s3:// by a mutation run of the machine (S3Storage.delete_tree made to remove only one object):
# `write_hostile_id("a/b")` on an empty root left `ds/versions/a/b/_staging/...`. On every store a write to
# X/versions/a/b, where X did not exist yet, was not refused at its start: it wrote `_WEBDATASET`, a lease
# and its staged shard and index, and only the commit refused it (NestedDatasetRoot: its own files made X
# hold versions/), then removed them. DESIGN.md "Paths are checked before anything is created"; now
# refused by its path (dataset/paths.py). The machine cannot see it (its tree comparison is after the
# cleanup): storage writes are recorded here (the real calls made).
def test_a_write_below_a_versions_directory_creates_nothing(tmp_path, monkeypatch) -> None:
    from spark_webdataset.errors import NestedDatasetRoot
    from spark_webdataset.storage.local import LocalStorage
    from tests.model import committer

    created: list[str] = []
    for name in ("write_atomic", "open_write", "create_only"):
        real = getattr(LocalStorage, name)

        def recorded(self, path, *args, _real=real, **kwargs):
            created.append(path)
            return _real(self, path, *args, **kwargs)

        monkeypatch.setattr(LocalStorage, name, recorded)
    with pytest.raises(NestedDatasetRoot, match="by its path"):
        committer.commit(f"{tmp_path}/ds/versions/a/b", {"k00": ("x", b"y")}, overwrite=False)
    assert created == [], f"a refused write created {created[:3]}"


def test_a_clean_sequence_passes_on_s3(s3_bucket) -> None:
    """The replay harness on s3:// (moto): a replay found there runs as `replay(S3Env(s3_bucket), steps)`."""
    from tests.model.storage_env import S3Env

    env = S3Env(s3_bucket)
    replay(env, [
        ("write", dict(version="v1", rows={"k00": ("a", b"x"), "k01": ("b", None)}, overwrite=True, parent=None,
                       change=None, retyped=1)),
        ("validate", dict(version="v1", require=False)),
        ("publish", dict(version="v1", date="2026-01-01")),
        ("write", dict(version="v2", rows={"k01": ("B", b"y")}, overwrite=True, parent="LATEST", change="upsert", retyped=1)),
        ("validate", dict(version="v2", require=False)),
        ("publish", dict(version="v2", date="2026-02-01")),
        ("read_third_party", dict(version="v2")),
        ("tamper", dict(version="v1", what="flip", pick=1)),
        ("gc", dict(keep_last=1, keep_days=None, min_age_zero=True, dry_run=False)),
    ])  # fmt: skip
