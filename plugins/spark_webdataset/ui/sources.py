"""The datasets the view shows: the configured ones, addressed by name only (never a path from a URL)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ConfiguredDataset:
    name: str
    root: str | None
    config_file: str
    error: str | None = None  # the config could not be loaded


def datasets_folder() -> Path:
    default = Path(__file__).resolve().parents[3] / "datasets"
    return Path(os.environ.get("SPARK_WEBDATASET_DATASETS") or default)


def configured_datasets(folder: str | Path | None = None) -> list[ConfiguredDataset]:
    """Every dataset config of the folder, in name order; a bad file is an entry with its error."""
    folder = Path(folder) if folder is not None else datasets_folder()
    try:
        from ..dataset_config import load_folder
    except ImportError:  # the config loader is not there: read `name` and `root` only
        return _read_minimally(folder)
    loaded = load_folder(folder)
    found = [ConfiguredDataset(c.name, c.root, str(c.path)) for c in loaded.configs]
    for error in loaded.errors:
        path = Path(str(getattr(error, "path", folder)))
        found.append(ConfiguredDataset(path.stem, None, str(path), str(error)))
    return sorted(found, key=lambda d: d.name)


def _read_minimally(folder: Path) -> list[ConfiguredDataset]:
    import yaml

    if not folder.is_dir():
        return [ConfiguredDataset(folder.name, None, str(folder), "the datasets folder does not exist")]
    found = []
    for path in sorted(folder.glob("*.y*ml")):
        try:
            document = yaml.safe_load(path.read_text()) or {}
            root = os.path.expandvars(str(document["root"]))
            if "://" not in root and not os.path.isabs(root):
                root = str((folder / root).resolve())
            found.append(ConfiguredDataset(str(document.get("name") or path.stem), root, str(path)))
        except Exception as error:  # noqa: BLE001 - one bad file is one row
            found.append(ConfiguredDataset(path.stem, None, str(path), f"{type(error).__name__}: {error}"))
    return found


def find(name: str, folder: str | Path | None = None) -> ConfiguredDataset | None:
    return next((d for d in configured_datasets(folder) if d.name == name), None)
