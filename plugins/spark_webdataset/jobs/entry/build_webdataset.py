"""spark-submit entry point: shard a Spark source into a WebDataset version.

    spark-submit "$(python -m spark_webdataset.jobs.entry build_webdataset.py)" --help

The logic lives in spark_webdataset.jobs.build (importable, tested).
"""

import sys

from spark_webdataset.jobs.build import main

if __name__ == "__main__":
    sys.exit(main())
