"""What a dataset root holds: versions, their state, logical dates, counts and sizes, and LATEST."""

from __future__ import annotations

from ..errors import InputError, NotCommitted
from .layout import Dataset
from .publish import record_order, version_order


def describe(root: str) -> dict:
    dataset = Dataset(root)
    if not dataset.storage.exists(dataset.root) and not dataset.version_ids() and not dataset.published_ids():
        raise InputError(f"{root}: no dataset there (no versions/, no published versions)")
    published = set(dataset.published_ids())
    records = {version: dataset.read_record(version) for version in published}
    versions = []
    for version_id in sorted(dataset.version_ids(), key=lambda v: record_order(v, records[v]) if v in records else version_order(v)):
        version = dataset.version(version_id)
        record = records.get(version_id)
        entry: dict = {
            "version": version_id,
            "uri": version.uri,
            "published": version_id in published,
            "logical_date": None if record is None else record_order(version_id, record)[0],
        }
        try:
            manifest = version.committed_manifest()
        except NotCommitted:
            manifest, entry["state"] = None, "not committed"
        if manifest is not None:
            entry.update(samples=manifest.samples, shards=len(manifest.shards), bytes=manifest.bytes)
        else:
            entry.update(samples=None, shards=None, bytes=None)
            entry.setdefault("state", "no manifest")
        validation = version.read_validation()
        entry["validated"] = None if validation is None else bool(validation.get("ok"))
        versions.append(entry)
    return {"root": dataset.root, "latest": dataset.read_latest(), "versions": versions}


def format_description(description: dict) -> str:
    from ..format.sizes import format_size

    lines = [f"{description['root']}  LATEST={description['latest']}"]
    for v in description["versions"]:
        flags = ("published" if v["published"] else "unpublished") + (
            "" if v["validated"] is None else (", valid" if v["validated"] else ", INVALID")
        )
        counts = (
            f"{v['shards']} shards, {v['samples']} samples, {format_size(v['bytes'])}"
            if v["samples"] is not None
            else v.get("state", "no manifest")
        )
        marker = "*" if v["version"] == description["latest"] else " "
        date = v["logical_date"] or "-"
        lines.append(f" {marker} {v['version']:<24} {date:<21} {counts:<48} {flags}")
    return "\n".join(lines)
