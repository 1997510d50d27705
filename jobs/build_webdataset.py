"""spark-submit entry point in a checkout: the same main() as the packaged spark_webdataset/jobs/entry/build_webdataset.py.

    spark-submit jobs/build_webdataset.py --help

An installed package needs no checkout: `python -m spark_webdataset.jobs.entry build_webdataset.py`
prints the packaged script's path, which is what the DAGs submit.
"""

import sys

from spark_webdataset.jobs.build import main

if __name__ == "__main__":
    sys.exit(main())
