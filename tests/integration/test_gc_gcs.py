"""gc on gs:// (the GCS emulator): the same rules through the Storage abstraction, object by object."""

from __future__ import annotations

import hashlib

import spark_webdataset
from spark_webdataset.dataset.catalog import describe_root
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.retention import PROOF_FILES, RetentionPolicy, collect
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.storage import storage_for
from tests.support.chains import build_chain, commit_version, publish_version


def objects(uri: str, prefix: str = "") -> dict[str, str]:
    """Every object below `uri`: path relative to it -> sha256 of its bytes."""
    storage = storage_for(uri)
    found = {
        prefix + name: hashlib.sha256(storage.read_bytes(storage.join(uri, name))).hexdigest()
        for name in storage.list_sizes(uri)
    }
    for name in storage.list_dirs(uri):
        found.update(objects(storage.join(uri, name), f"{prefix}{name}/"))
    return found


def test_gc_on_gcs_retires_old_versions_keeps_what_kept_ones_reference_and_changes_nothing_on_a_dry_run(bucket) -> None:
    root = f"{bucket}/ds"
    publish_version(root, "v1", 1000, 20, logical_date="2026-10-01T00:00:00Z")
    build_chain(root, ["v2", "v3", "v4"], per_version=20)
    commit_version(root, "tmp-dead", 2000, 5)
    before = objects(root)
    read_before = [(key, sample) for reader in [spark_webdataset.open(root)] for key, sample in
                   ((k, reader.get(k)) for k in reader.keys())]  # fmt: skip
    policy = RetentionPolicy(keep_last=2, min_age_seconds=0)

    planned = collect(root, policy, dry_run=True)
    assert objects(root) == before and planned.retired == ["v1", "v2"] and planned.bytes_freed > 0

    report = collect(root, policy)
    assert report.retired == ["v1", "v2"] and report.removed_unpublished == ["tmp-dead"]
    assert report.bytes_freed == planned.bytes_freed
    after = objects(root)
    kept = ("versions/v3/", "versions/v4/", "_published/v3.json", "_published/v4.json", "LATEST")
    assert {p: h for p, h in after.items() if p.startswith(kept)} == {
        p: h for p, h in before.items() if p.startswith(kept)
    }
    reader = spark_webdataset.open(root)
    assert [(key, reader.get(key)) for key in reader.keys()] == read_before
    # v4 references v2's shards: proven by v2's validation report, generations and the server's crc32c
    assert validate_version(f"{root}/versions/v4", workers=1, write_report=False).ok
    assert Dataset(root).published_ids() == ["v3", "v4"]
    assert {v.version: v.state.value for v in describe_root(root).versions} == {
        "v2": "retired",
        "v3": "published",
        "v4": "latest",
    }
    held = {e.name for e in Dataset(root).version("v4").read_manifest().shards if e.version == "v2"}
    assert held and {p for p in after if p.startswith("versions/v2/")} == {
        f"versions/v2/{n}" for n in held | set(PROOF_FILES)
    }
    assert not any(
        p.startswith(("versions/v1/", "versions/tmp-dead/", "_published/v1", "_published/v2")) for p in after
    )
    assert collect(root, policy).files_deleted == [] and objects(root) == after
