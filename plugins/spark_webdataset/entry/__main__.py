"""Print an entry script's path, for spark-submit by hand on an installed package.

    spark-submit "$(python -m spark_webdataset.entry build_webdataset.py)" --source ... --output ...
"""

import sys

from spark_webdataset.entry import BUILD_WEBDATASET, RESHARD, script

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in (BUILD_WEBDATASET, RESHARD):
        sys.exit(f"usage: python -m spark_webdataset.entry {{{BUILD_WEBDATASET},{RESHARD}}}")
    print(script(sys.argv[1]))
