"""The spark-submit entry scripts, shipped inside the package.

spark-submit runs a file, not a module, so the DAG needs a path; taking it
from the installed package (`importlib.resources`) means `pip install` of
the wheel is enough: nothing assumes a checkout's `jobs/` folder, which
only keeps thin wrappers of these for `spark-submit jobs/...` by hand.
"""

from __future__ import annotations

from importlib.resources import files

BUILD_WEBDATASET = "build_webdataset.py"
RESHARD = "reshard.py"


def script(name: str) -> str:
    """The file-system path of entry script `name` (BUILD_WEBDATASET, RESHARD), for spark-submit.

    The package must be installed as files (a wheel, an editable install),
    not imported from a zip: spark-submit cannot run a file inside a zip.
    """
    path = files(__name__) / name
    if not path.is_file():
        raise FileNotFoundError(f"no entry script {name!r} in the installed package ({files(__name__)})")
    return str(path)
