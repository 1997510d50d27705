"""spark-submit entry point in a checkout: runs the packaged one (spark_webdataset/entry/reshard.py).

    spark-submit jobs/reshard.py --help

An installed package needs no checkout: `python -m spark_webdataset.entry reshard.py`
prints the packaged script's path.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("spark_webdataset.entry.reshard", run_name="__main__", alter_sys=True)
