"""The datasets the view shows: the configured ones, addressed by name only (never a path from a URL)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..configs import datasets_folder, load_folder


@dataclass(frozen=True)
class ConfiguredDataset:
    name: str
    root: str | None
    config_file: str
    error: str | None = None  # the config could not be loaded
    retention: dict | None = None  # the config's `retention:` (keep_last, keep_days, min_age), if any


def configured_datasets(folder: str | Path | None = None) -> list[ConfiguredDataset]:
    """Every dataset config of the folder (the DAGs' folder by default), in name order; a bad file is a row."""
    loaded = load_folder(Path(folder) if folder is not None else datasets_folder())
    found = [
        ConfiguredDataset(c.name, c.root, str(c.path), retention=c.retention.model_dump() if c.retention else None)
        for c in loaded.configs
    ]
    for error in loaded.errors:
        path = Path(str(getattr(error, "path", folder)))
        found.append(ConfiguredDataset(path.stem, None, str(path), str(error)))
    return sorted(found, key=lambda d: d.name)


def find(name: str, folder: str | Path | None = None) -> ConfiguredDataset | None:
    return next((d for d in configured_datasets(folder) if d.name == name), None)
