"""spark-submit entry point in a checkout: runs the packaged one (spark_webdataset/entry/build_webdataset.py).

    spark-submit jobs/build_webdataset.py --help

An installed package needs no checkout: `python -m spark_webdataset.entry build_webdataset.py`
prints the packaged script's path, which is what the DAGs submit.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("spark_webdataset.entry.build_webdataset", run_name="__main__", alter_sys=True)
