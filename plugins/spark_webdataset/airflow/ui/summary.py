"""What a configured dataset's root holds, as plain dicts: the catalog's description of its versions
(`dataset.catalog`, the one vocabulary of states `inspect` uses too), paged for the view.

Names that come from a URL are checked here before any path is built:
a version id by `layout.check_version_id`, a shard location by `check_shard_location`
and by being listed in the version's manifest. Keys are data, never part of
a path: a shard's first or last key that breaks a key rule is marked
(`key_problem`), not shown as an ordinary key.
"""

from __future__ import annotations

import datetime

from ...dataset.catalog import UNREADABLE, RootListing
from ...dataset.layout import Dataset, Version
from ...dataset.ordering import iso_utc
from ...dataset.paths import check_shard_location, check_version_id
from ...dataset.tree import PUBLISHED_DIR
from ...errors import NotFound
from ...format.manifest import Manifest
from ...format.names import key_error


def key_range_problem(first_key: object, last_key: object) -> str | None:
    """Which key rule a shard's first or last key breaks (the first found), or None."""
    for which, key in (("first", first_key), ("last", last_key)):
        problem = key_error(key)
        if problem is not None:
            return f"{which} key {key!r}: {problem}"
    return None


def dataset_summary(root: str) -> dict:
    """Root, LATEST, version count and the last publish time (cheap: no manifest is read)."""
    dataset = Dataset(root)
    published = dataset.published_ids()
    # when the newest publish record was written: one listing, not one read per record
    records_dir = dataset.storage.join(dataset.root, PUBLISHED_DIR)
    newest = dataset.storage.newest_modification(records_dir) if published else None
    return {
        "root": dataset.root,
        "latest": dataset.read_latest(),
        "versions": len(dataset.version_ids()),
        "published": len(published),
        "last_published_at": None
        if newest is None
        else iso_utc(datetime.datetime.fromtimestamp(newest, datetime.timezone.utc).replace(microsecond=0)),
    }


def versions_page(root: str, page: int = 1, per_page: int = 20) -> dict:
    """One page of versions, newest first (the catalog's order, reversed); only the page's versions are read."""
    listing = RootListing.read(Dataset(root))
    ids = list(reversed(listing.ids))
    page = max(1, page)
    per_page = max(1, min(per_page, 200))
    chosen = ids[(page - 1) * per_page : page * per_page]
    rows = []
    for version_id in chosen:
        try:
            rows.append(listing.describe_version(version_id).as_dict())
        except Exception as error:  # noqa: BLE001 - one unreadable version is one row
            rows.append({"version": version_id, "state": UNREADABLE, "error": f"{type(error).__name__}: {error}"})
    return {
        "root": listing.dataset.root,
        "latest": listing.latest,
        "total": len(ids),
        "page": page,
        "per_page": per_page,
        "pages": max(1, -(-len(ids) // per_page)),
        "versions": rows,
    }


def resolve_version(root: str, version_id: str) -> Version:
    """The version named by a URL: a valid id (InvalidVersionId otherwise) that exists under the root."""
    dataset = Dataset(root)
    return _resolve(dataset, version_id, dataset.read_latest() if version_id == "LATEST" else None)


def _resolve(dataset: Dataset, version_id: str, latest: str | None) -> Version:
    """As resolve_version, with LATEST already read (`latest`)."""
    if version_id == "LATEST":
        if latest is None:
            raise NotFound(f"{dataset.root}: no LATEST (nothing published yet)")
        version_id = latest
    check_version_id(version_id)
    if version_id not in dataset.version_ids():
        raise NotFound(f"{dataset.root}: no version {version_id!r}")
    return dataset.version(version_id)


def version_detail(root: str, version_id: str) -> dict:
    """A version's description (the catalog's), its shards (from its manifest), its validation report
    and its publish record."""
    return version_detail_and_manifest(root, version_id)[0]


def version_detail_and_manifest(root: str, version_id: str) -> tuple[dict, Manifest | None]:
    """`version_detail`, and the manifest it read (the page's preview reads no second one)."""
    dataset = Dataset(root)
    latest = dataset.read_latest()  # once: it also resolves a version named LATEST
    version = _resolve(dataset, version_id, latest)
    assert version.id is not None
    record = dataset.read_record(version.id)
    described = RootListing(dataset, latest, {} if record is None else {version.id: record}, [version.id])
    description = described.describe_version(version.id, read_manifest=True)
    manifest, validation = description.manifest, description.report
    checked = {s.get("name"): s for s in (validation or {}).get("shards", []) if isinstance(s, dict)}
    shards = []
    for shard in [] if manifest is None else manifest.shards:
        shards.append(
            {
                "name": shard.location,
                "samples": shard.samples,
                "bytes": shard.bytes,
                "crc32c": shard.crc32c,
                "sha256": shard.sha256 or (checked.get(shard.location) or {}).get("sha256"),
                "first_key": shard.first_key,
                "last_key": shard.last_key,
                "key_problem": key_range_problem(shard.first_key, shard.last_key) if shard.samples else None,
            }
        )
    report = None
    if validation is not None:
        report = {
            "ok": bool(validation.get("ok")),
            "checked_at": (validation.get("run") or {}).get("checked_at"),
            "error_count": validation.get("error_count", 0),
            "errors": validation.get("errors", [])[:50],
            "samples": validation.get("samples"),
            "bytes": validation.get("bytes"),
        }
    return {
        **description.as_dict(),
        "root": dataset.root,
        "latest": latest,
        "is_latest": description.latest,
        "committed": manifest is not None,
        "samples": None if manifest is None else manifest.samples,
        "bytes": None if manifest is None else manifest.bytes,
        "fields": [] if manifest is None else manifest.fields,
        "shards": shards,
        "validation": report,
        "publish_record": record,
        "index": None if record is None else record.get("index"),
        "sample_index_bytes": None if manifest is None else manifest.sample_index_bytes,
        "sample_index_layers": [] if manifest is None else [layer.to_dict() for layer in manifest.sample_index_layers],
    }, manifest


def shard_entries(version: Version, shard: str | None = None) -> list[tuple[str, int]]:
    """(name, bytes) of the version's shards, or of one shard that its manifest lists."""
    manifest = version.committed_manifest()
    if manifest is None:
        raise NotFound(f"{version.uri}: no manifest (the version was never committed)")
    return choose_shards(version.uri, [(s.location, s.bytes) for s in manifest.shards], shard)


def choose_shards(uri: str, entries: list[tuple[str, int]], shard: str | None) -> list[tuple[str, int]]:
    """All of a version's (location, bytes) entries, or the one at `shard` (checked, and listed)."""
    if shard is None:
        return entries
    check_shard_location(shard)
    chosen = [e for e in entries if e[0] == shard]
    if not chosen:
        raise NotFound(f"{uri}: the manifest lists no shard {shard!r}")
    return chosen


def gc_cost(root: str, retention: dict | None) -> dict:
    """What gc would free now (reads only): with the config's retention, else the Asset event's default
    (`keep_last: 1`, gc's min-age). Lists every version directory: shown on a dataset's page, not the overview."""
    from ...dataset.catalog import gc_would_free
    from ...dataset.retention import RetentionPolicy
    from ..pipeline import DEFAULT_COST_POLICY

    if retention:
        policy = RetentionPolicy(retention["keep_last"], retention.get("keep_days"), retention["min_age"])
    else:
        policy = DEFAULT_COST_POLICY
    try:
        return {"configured": bool(retention), **gc_would_free(root, policy)}
    except Exception as error:  # noqa: BLE001 - a cost the page cannot tell is a note, never a failed page
        return {"configured": bool(retention), "error": f"{type(error).__name__}: {error}"}
