"""Which committed version a read of a URI means: one rule for every reader (the Spark reader,
`open()`, the CLI's `get`), so they never disagree on what a path holds.

ROOT/versions/ID reads its own manifest, first and alone when it has one (no requests about
roots); a dataset root reads its LATEST version, checked against its publish record; any other
directory reads the manifest our writer committed there, if any. Our writers never nest a root in
a version, but a root moved there by hand (ROOT/versions/ID holding LATEST and no manifest) reads as
the root it is, by every reader.
"""

from __future__ import annotations

from ..format import manifest as manifests
from ..format.manifest import Manifest
from .layout import Dataset, Version


def committed_version(uri: str) -> tuple[Version, Manifest | None]:
    """The version `uri` means and its committed manifest (None: nothing our writer committed there)."""
    version = Version.at(uri)
    if version.id is not None:
        with manifests.naming(lambda: version.manifest_uri):
            manifest = version.committed_manifest()
        if manifest is not None:
            return version, manifest
    dataset = Dataset(uri)
    if dataset.is_dataset_root():
        with manifests.naming(lambda: latest_manifest_uri(dataset)):
            return dataset.latest()
    if version.id is not None:
        return version, None
    with manifests.naming(lambda: version.manifest_uri):
        return version, version.committed_manifest()


def latest_manifest_uri(dataset: Dataset) -> str:
    """The manifest file of the dataset's LATEST version (to name it in an error)."""
    return dataset.version(dataset.read_latest() or "").manifest_uri
