"""`spark-webdataset`: the command line for people and scripts."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def _demo_source(args: argparse.Namespace) -> int:
    from .demo import write_digits_source

    rows = write_digits_source(args.directory, files=args.files)
    print(f"wrote {rows} digits to {args.directory} ({args.files} parquet files)")
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark-webdataset", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo-source", help="write the scikit-learn digits demo source as parquet")
    demo.add_argument("directory")
    demo.add_argument("--files", type=int, default=8)
    demo.set_defaults(run=_demo_source)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
