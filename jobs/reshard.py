"""spark-submit entry point in a checkout: the same main() as the packaged spark_webdataset/jobs/entry/reshard.py.

    spark-submit jobs/reshard.py --help

An installed package needs no checkout: `python -m spark_webdataset.jobs.entry reshard.py`
prints the packaged script's path.
"""

import sys

from spark_webdataset.jobs.reshard import main

if __name__ == "__main__":
    sys.exit(main())
