"""Entry points of the installed package for a shell: no checkout needed.

spark-submit "$(python -m spark_webdataset.jobs.entry build_webdataset.py)" --source ... --output ...
python -m spark_webdataset.jobs.entry --pyfiles dist/spark_webdataset.zip   # for spark.py_files
"""

import argparse

from spark_webdataset.jobs.entry import BUILD_WEBDATASET, RESHARD, script, write_pyfiles

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m spark_webdataset.jobs.entry", description=__doc__.split("\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("script", nargs="?", choices=(BUILD_WEBDATASET, RESHARD), help="print this script's path")
    which.add_argument("--pyfiles", metavar="ZIP", help="write the package as a zip for executors; print its path")
    arguments = parser.parse_args()
    print(write_pyfiles(arguments.pyfiles) if arguments.pyfiles else script(arguments.script))
