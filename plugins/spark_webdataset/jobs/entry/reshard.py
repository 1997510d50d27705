"""spark-submit entry point: reshard a WebDataset version (new caps, or a multiple of N shards).

    spark-submit "$(python -m spark_webdataset.jobs.entry reshard.py)" --help

The logic lives in spark_webdataset.jobs.reshard (importable, tested).
"""

import sys

from spark_webdataset.jobs.reshard import main

if __name__ == "__main__":
    sys.exit(main())
