"""Fail fast on the pyspark / pyspark-client trap: both must be one version.

pyspark-client (pulled in by the Airflow Spark provider) overwrites
pyspark's files; with two versions, UDFs and data sources break while
`pip check` stays quiet.
"""

import sys
from importlib import metadata


def main() -> int:
    versions = {}
    for name in ("pyspark", "pyspark-client"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    if versions["pyspark-client"] and versions["pyspark-client"] != versions["pyspark"]:
        print(f"pyspark {versions['pyspark']} != pyspark-client {versions['pyspark-client']}: pin both to one version")
        return 1
    import pyspark

    if pyspark.__version__ != versions["pyspark"]:
        print(f"pyspark files say {pyspark.__version__}, metadata says {versions['pyspark']}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
