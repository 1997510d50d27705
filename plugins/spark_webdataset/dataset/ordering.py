"""The one order of a root's versions, and the dates it reads from ids and publish records."""

from __future__ import annotations

import datetime
import re

from ..errors import InvalidVersionId

# Timestamps read from a version id when nothing better says when a version is from.
_ID_TIMESTAMPS = (
    (re.compile(r"(\d{8}T\d{6}Z)", re.ASCII), "%Y%m%dT%H%M%SZ"),
    (re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})", re.ASCII), "%Y-%m-%dT%H:%M:%S"),
    (re.compile(r"(\d{4}-\d{2}-\d{2})", re.ASCII), "%Y-%m-%d"),
    (re.compile(r"(?<!\d)(\d{8})(?!\d)", re.ASCII), "%Y%m%d"),
)


def timestamp_in_id(version: str) -> datetime.datetime | None:
    """A UTC timestamp spelled in the id (20261201T000000Z, 2026-12-01, 20261201), if any."""
    for pattern, layout in _ID_TIMESTAMPS:
        match = pattern.search(version)
        if match:
            try:
                moment = datetime.datetime.strptime(match.group(1), layout)
            except ValueError:
                continue
            return moment.replace(tzinfo=datetime.timezone.utc)
    return None


def iso_utc(moment: datetime.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def natural_order(version: str) -> tuple:
    """Digits compare as numbers, so v10 follows v9."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.findall(r"\d+|\D+", version))


def version_order(version: str) -> tuple:
    """Order of version ids by the timestamp they spell (ids without one sort first), then naturally."""
    moment = timestamp_in_id(version)
    return (iso_utc(moment) if moment else "", natural_order(version))


def record_order(version: str, record: dict | None) -> tuple:
    """Where a published version stands for LATEST: (logical date, version id in natural order).
    The logical date is its publish record's, else the timestamp its id spells, else when it was published."""
    logical = (record or {}).get("logical_date")
    if not logical:
        moment = timestamp_in_id(version)
        logical = iso_utc(moment) if moment else (record or {}).get("published_at", "")
    return str(logical), natural_order(version)


def version_sort_key(version: str, record: dict | None) -> tuple:
    """The one order of a root's versions (oldest first): a published version by `record_order`,
    any other by `version_order` (the timestamp its id spells)."""
    return record_order(version, record) if record is not None else version_order(version)


def parse_logical_date(text: str) -> datetime.datetime:
    """An ISO-8601 date or date-time (naive means UTC)."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidVersionId(f"logical date {text!r} is not ISO-8601 (e.g. 2026-11-15T00:00:00Z)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)
