"""What spark-submit needs from the installed package: the entry scripts, and the package as a zip.

spark-submit runs a file, not a module, so the DAG needs a path; taking it
from the installed package (`importlib.resources`) means `pip install` of
the wheel is enough: nothing assumes a checkout's `jobs/` folder, which
only keeps thin wrappers of these for `spark-submit jobs/...` by hand.
Executors whose Python lacks the package get it as a zip (`--py-files`,
a config's `spark.py_files`), written from the installed files.
"""

from __future__ import annotations

import functools
import os
import zipfile
from importlib.resources import files
from pathlib import Path

BUILD_WEBDATASET = "build_webdataset.py"
RESHARD = "reshard.py"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the oldest a zip can hold: same sources, same bytes


@functools.cache  # DAG files call it at every parse; the path does not change in a process
def script(name: str) -> str:
    """The file-system path of entry script `name` (BUILD_WEBDATASET, RESHARD), for spark-submit.

    The package must be installed as files (a wheel, an editable install),
    not imported from a zip: spark-submit cannot run a file inside a zip.
    """
    path = files(__name__) / name
    if not path.is_file():
        raise FileNotFoundError(f"no entry script {name!r} in the installed package ({files(__name__)})")
    return str(path)


def write_pyfiles(out: str | os.PathLike[str]) -> Path:
    """Write the package's .py files, as imported here, to zip `out` for executors; byte-identical per source."""
    package = Path(str(files("spark_webdataset")))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, dirs, names in sorted(os.walk(package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(n for n in names if n.endswith(".py")):
                path = Path(folder) / name
                info = zipfile.ZipInfo(path.relative_to(package.parent).as_posix(), date_time=ZIP_DATE)
                archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return out
