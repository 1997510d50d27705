"""What a dataset root holds: versions, which are published, LATEST, counts and sizes."""

from __future__ import annotations

from .format.manifest import MANIFEST_NAME, Manifest
from .publish import PUBLISHED_DIR, read_latest, version_order
from .storage import storage_for
from .validate import read_validation


def describe(root: str) -> dict:
    storage = storage_for(root)
    published = {
        name[: -len(".json")]
        for name in storage.list_sizes(storage.join(root, PUBLISHED_DIR))
        if name.endswith(".json")
    }
    versions = []
    for version in sorted(storage.list_dirs(storage.join(root, "versions")), key=version_order):
        directory = storage.join(root, "versions", version)
        manifest_path = storage.join(directory, MANIFEST_NAME)
        entry: dict = {"version": version, "uri": directory, "published": version in published}
        if storage.exists(manifest_path):
            manifest = Manifest.from_json(storage.read_bytes(manifest_path))
            entry.update(samples=manifest.samples, shards=len(manifest.shards), bytes=manifest.bytes)
        else:
            entry.update(samples=None, shards=None, bytes=None, state="not committed")
        validation = read_validation(directory)
        entry["validated"] = None if validation is None else bool(validation.get("ok"))
        versions.append(entry)
    return {"root": root, "latest": read_latest(root), "versions": versions}


def format_description(description: dict) -> str:
    from .format.sizes import format_size

    lines = [f"{description['root']}  LATEST={description['latest']}"]
    for v in description["versions"]:
        flags = ("published" if v["published"] else "unpublished") + (
            "" if v["validated"] is None else (", valid" if v["validated"] else ", INVALID")
        )
        counts = (
            f"{v['shards']} shards, {v['samples']} samples, {format_size(v['bytes'])}"
            if v["samples"] is not None
            else "no manifest"
        )
        marker = "*" if v["version"] == description["latest"] else " "
        lines.append(f" {marker} {v['version']:<24} {counts:<48} {flags}")
    return "\n".join(lines)
