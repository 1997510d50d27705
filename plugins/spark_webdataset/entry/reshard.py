"""spark-submit entry point: reshard a WebDataset version (new caps, or a multiple of N shards).

    spark-submit "$(python -m spark_webdataset.entry reshard.py)" --help

The logic lives in spark_webdataset.reshard_job (importable, tested).
"""

import sys

from spark_webdataset.reshard_job import main

if __name__ == "__main__":
    sys.exit(main())
