"""A commit lists the version's directories once (issue 30: the commit's fixed cost).

The journal's first sweep (before the renames) and its second (after the manifest swap) share one
listing: the renames add only files the new manifest lists, so what the second pass may remove
was there when the first listed. Listing a local directory stats every file (a request a page on
gs://), so a second listing doubled the part of every commit that grows with the version's shards.
The sweeps' safety (an object replaced after the listing stays) is tested in
test_commit_mutations.py; here the count and that the second pass still removes what the new
manifest dropped (the previous sample index, the shards an overwrite or a change replaced).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from spark_webdataset.dataset.layout import Version
from spark_webdataset.storage.local import LocalStorage
from tests.support.fenced_committer import commit_samples


@pytest.fixture
def listings(monkeypatch) -> Counter:
    """The directories `identities` lists (the real LocalStorage, counted)."""
    seen: Counter = Counter()
    real = LocalStorage.identities

    def counted(self, directory: str):
        seen[directory.rstrip("/")] += 1
        return real(self, directory)

    monkeypatch.setattr(LocalStorage, "identities", counted)
    return seen


def test_an_append_commit_lists_the_version_directory_once_and_drops_the_old_index(tmp_path, listings) -> None:
    uri = str(tmp_path / "v")
    commit_samples(uri, "a", 30)
    version = Version.at(uri)
    old_index = version.read_manifest().sample_index
    listings.clear()
    commit_samples(uri, "b", 30)
    assert listings[version.uri.rstrip("/")] == 1
    assert listings[version.sample_index_dir_uri.rstrip("/")] == 1
    manifest = version.read_manifest()
    assert manifest.samples == 60 and manifest.sample_index != old_index
    index_files = sorted(p.name for p in Path(version.sample_index_dir_uri).iterdir())
    assert index_files == [manifest.sample_index.rsplit("/", 1)[-1]]  # the previous index is gone
    assert sorted(p.name for p in Path(uri).glob("*.tar")) == sorted(s.name for s in manifest.own_shards)
