"""The dataset's tree on storage: the one module that names its files and directories.

The tree they form is drawn once, for users, in docs/versions.md ("A dataset on storage");
tests/unit/repo/test_layout_documented.py checks that it shows every name below. Nothing else
spells these names: the writer, reader, validate, publish, catalog, jobs, CLI and DAGs ask a
`Dataset` or a `Version` (layout.py) for their paths, and dataset/paths.py checks where a root or a
version may be.
"""

from __future__ import annotations

VERSIONS_DIR = "versions"  # ROOT/versions/<version>/: one directory a version
PUBLISHED_DIR = "_published"  # ROOT/_published/<version>.json: the commit point of publish (visible iff it exists)
LATEST_NAME = "LATEST"  # ROOT/LATEST: the newest published version
LATEST_CHANGES_NAME = "_latest_changes.json"  # who set LATEST by hand, and when
MANIFEST_NAME = "_manifest.json"  # the truth about a version directory (written last)
VALIDATION_NAME = "_validation.json"  # validation's report
SHARD_INDEX_NAME = "shardindex.json"  # the wids index, written by publish
SEAL_NAME = "_SEALED"  # publish's seal: no writer may touch the version again
WRITER_MARK_NAME = "_WEBDATASET"  # our writer's mark, from the first staged byte on
STAGING_DIR = "_staging"  # _staging/<job>/: per-attempt staging of live jobs
SAMPLE_INDEX_DIR = "_index"  # the sample index (one file, replaced at each commit)
COMMIT_LOCK_NAME = "_commit.lock"  # one committer at a time (lock.py)
COMMIT_JOURNAL_NAME = "_commit.json"  # a decided commit, finished by whoever comes next (journal.py)
RETIRED_NAME = "_RETIRED"  # gc retired the version: publish refuses it, a gc rerun finishes removing it
PINS_DIR = "_pins"  # ROOT/_pins/<version>: gc never retires a pinned version
# Files of a version directory that are not shards.
METADATA_FILES = frozenset(
    {
        MANIFEST_NAME,
        VALIDATION_NAME,
        SHARD_INDEX_NAME,
        SEAL_NAME,
        WRITER_MARK_NAME,
        COMMIT_LOCK_NAME,
        COMMIT_JOURNAL_NAME,
        RETIRED_NAME,
    }
)
WRITER_MARK = b'{"__kind__": "spark-webdataset-directory-v1"}\n'
SHARD_PATTERN = "shard-{:06d}.tar"  # contiguous: shard-{000000..000041}.tar works
LEASE_NAME = "_lease.json"  # in _staging/<job>/: which driver owns the job's staging
STAGED_SHARD_PATTERN = "{:06d}.tar"  # a task attempt's n-th shard, in its staging directory
STAGED_INDEX_NAME = "index.arrow"  # a task attempt's sorted sample index rows, in its staging directory


def shard_name(index: int) -> str:
    return SHARD_PATTERN.format(index)


def is_shard_name(name: str) -> bool:
    """A name our writer gives shards (files of other names in a version directory are not ours)."""
    return name.startswith("shard-") and name.endswith(".tar")


def shard_number(name: str) -> int | None:
    """The number in a name `shard_name` gave (None for any other name, `shard-².tar` too: ASCII digits only)."""
    digits = name[len("shard-") : -len(".tar")] if is_shard_name(name) else ""
    return int(digits) if digits.isascii() and digits.isdigit() else None


def staged_shard_name(sequence: int) -> str:
    return STAGED_SHARD_PATTERN.format(sequence)


def staged_sample_index_name(serial: int) -> str:
    """The merged sample index a commit stages in its job's directory before naming it `sample_index_path(serial)`."""
    return f"index-{serial:06d}.parquet"


def sample_index_path(serial: int) -> str:
    """A version's sample index, relative to the version directory (the manifest's `sample_index`)."""
    return f"{SAMPLE_INDEX_DIR}/{serial:06d}.parquet"


def sample_index_serial(path: str) -> int:
    """The serial of a sample index, committed (`_index/000003.parquet`) or staged (`index-000003.parquet`)."""
    return int(path.rsplit("/", 1)[-1].split(".")[0].removeprefix("index-"))
