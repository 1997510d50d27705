"""spark-submit entry point: shard a Spark source into a WebDataset version.

    spark-submit "$(python -m spark_webdataset.entry build_webdataset.py)" --help

The logic lives in spark_webdataset.build_job (importable, tested).
"""

import sys

from spark_webdataset.build_job import main

if __name__ == "__main__":
    sys.exit(main())
