"""`spark-webdataset`: validate, publish and inspect datasets; gc and pin versions; check dataset configs;
make the demo source; stream objects (shards) to stdout; read one sample by key through the sample index."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from .errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK


def _report(args: argparse.Namespace, document: object, text: str) -> None:
    """A command's answer on stdout: `text` for people, or with --json `document` for programs
    (docs/cli.md shows each command's shape)."""
    print(json.dumps(document, indent=1) if args.json else text)


def _demo_source(args: argparse.Namespace) -> int:
    from .jobs.demo import write_digits_source

    rows = write_digits_source(args.directory, files=args.files)
    _report(args, {"directory": args.directory, "rows": rows, "files": args.files},
            f"wrote {rows} digits to {args.directory} ({args.files} parquet files)")  # fmt: skip
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from .dataset.validate import validate_version
    from .jobs.validate_spark import spark_check

    report = validate_version(
        args.version_uri,
        workers=args.workers,
        require=args.require,
        check=spark_check(args.spark_master) if args.spark_master else None,
        progress=not args.quiet,
        full=args.full,
        report_path=args.report,
    )
    document = {**json.loads(report.to_json()), "written_to": report.written_to, "sealed": report.sealed}
    _report(args, document, report.summary())
    return EXIT_OK if report.ok else EXIT_FAILED


def _publish(args: argparse.Namespace) -> int:
    from .dataset.publish import publish

    waits = {} if args.lock_wait is None else {"lock_wait_seconds": args.lock_wait}
    result = publish(args.root, args.version, logical_date=args.logical_date, allow_empty=args.allow_empty, **waits)
    state = "already published (no-op)" if result.already_published else "published"
    _report(args, result.as_dict(),
        f"{state}: {result.version} ({result.shards} shards, {result.samples} samples, {result.bytes} bytes); "
        f"logical date {result.logical_date}; LATEST={result.latest}; index {result.index_uri}"
    )  # fmt: skip
    return EXIT_OK


def _latest(args: argparse.Namespace) -> int:
    from .dataset.layout import Dataset
    from .dataset.publish import set_latest

    if args.set is None:
        latest = Dataset(args.root).read_latest()
        _report(args, {"latest": latest}, latest or "(no LATEST)")
        return EXIT_OK
    previous = set_latest(args.root, args.set, by=args.by)
    _report(args, {"latest": args.set, "previous": previous, "by": args.by},
            f"LATEST={args.set} (was {previous}); recorded by {args.by}")  # fmt: skip
    return EXIT_OK


def _inspect(args: argparse.Namespace) -> int:
    from .dataset.catalog import describe_root, format_description

    retention = None
    if args.keep_last is not None:
        from .dataset.retention import RetentionPolicy

        retention = RetentionPolicy(args.keep_last, keep_days=args.keep_days, min_age_seconds=args.min_age)
    description = describe_root(args.root, retention)
    _report(args, description.as_dict(), format_description(description))
    return EXIT_OK


def _gc(args: argparse.Namespace) -> int:
    from .dataset.retention import RetentionPolicy, collect

    policy = RetentionPolicy(args.keep_last, keep_days=args.keep_days, min_age_seconds=args.min_age)
    report = collect(args.root, policy, dry_run=args.dry_run)
    _report(args, report.as_dict(), report.summary())
    return EXIT_OK


def _pin(args: argparse.Namespace) -> int:
    from .dataset.retention import pin, unpin

    if args.command == "pin":
        pin(args.root, args.version, by=args.by, reason=args.reason)
        _report(args, {"version": args.version, "pinned": True, "changed": True},
                f"pinned {args.version} in {args.root}: gc keeps it until `spark-webdataset unpin`")  # fmt: skip
    else:
        was = unpin(args.root, args.version)
        _report(args, {"version": args.version, "pinned": False, "changed": was},
                f"unpinned {args.version} in {args.root}" if was else f"{args.version} was not pinned in {args.root}")  # fmt: skip
    return EXIT_OK


def _duration(text: str) -> float:
    from .dataset.build_rules import parse_duration
    from .errors import BadOption

    try:
        return parse_duration(text)
    except BadOption as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _cat(args: argparse.Namespace) -> int:
    """Stream objects to stdout through our Storage: webdataset and wids open gs:// shards as
    `pipe:spark-webdataset cat gs://...` (STORAGE_EMULATOR_HOST and ADC apply; no gsutil)."""
    import shutil

    from .errors import InputError
    from .format.names import control_error
    from .storage import storage_for

    for uri in args.uri:
        problem = control_error(uri)
        if problem:  # a local path with a NUL would reach open() as a ValueError
            raise InputError(f"{uri!r} is not a path: it holds {problem}")
    out = sys.stdout.buffer
    try:
        for uri in args.uri:
            with storage_for(uri).open_read(uri) as stream:
                shutil.copyfileobj(stream, out, CAT_CHUNK_BYTES)
        out.flush()
    except BrokenPipeError:  # the reader stopped early (e.g. it took the first sample): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())  # no second error when Python flushes at exit
        return EXIT_BROKEN_PIPE
    except OSError as error:  # a read that failed half-way (EIO): the object's fault, named
        from .errors import StorageError

        raise StorageError(f"{uri}: reading it failed: {error.strerror or error}") from None
    return 0


def _get(args: argparse.Namespace) -> int:
    """One sample by key: where it lies and its fields' sizes, or one field's bytes to stdout."""
    import spark_webdataset

    samples = spark_webdataset.open(args.uri)
    entry = samples.locate(args.key)
    if entry is None:  # the answer is no, as grep's exit 1
        print(f"spark-webdataset get: error: no sample with key {args.key!r} in {samples.uri}", file=sys.stderr)
        return EXIT_FAILED
    sample = samples.read(entry)
    if args.field is None:  # where it lies: JSON with or without --json (one shape, nothing to parse twice)
        fields = {name: len(data or b"") for name, data in sample.items() if name != "__key__"}
        print(
            json.dumps(
                {
                    "key": entry.key,
                    "shard": entry.shard,
                    "offset": entry.offset,
                    "length": entry.length,
                    "version": samples.uri,
                    "fields": fields,
                },
                indent=1,
            )
        )
        return EXIT_OK
    if args.field not in sample or args.field == "__key__":
        has = ", ".join(name for name in sample if name != "__key__")
        print(f"spark-webdataset get: error: sample {args.key!r} has no field {args.field!r} (it has {has})",
              file=sys.stderr)  # fmt: skip
        return EXIT_BAD_INPUT
    sys.stdout.buffer.write(sample[args.field] or b"")
    sys.stdout.buffer.flush()
    return 0


CAT_CHUNK_BYTES = 1 << 20
EXIT_BROKEN_PIPE = 141  # as a shell reports a process a closed pipe ended (128 + SIGPIPE); webdataset ignores it


def _datasets(args: argparse.Namespace) -> int:
    from .airflow.configs import DATASETS_ENV, load_folder
    from .errors import InvalidDatasetConfigs

    try:  # with Airflow installed, the full check: the DAG each config gives (schedule included)
        from .airflow.dags import build_dags
    except ImportError:
        build_dags = None
    # As the help says: --folder, else SPARK_WEBDATASET_DATASETS, else datasets/ here (never Airflow's
    # default home, which a shell outside a deployment does not mean)
    folder = args.folder or os.environ.get(DATASETS_ENV) or "datasets"
    loaded = build_dags(folder) if build_dags is not None else load_folder(folder)
    configs, errors = loaded.configs, loaded.errors
    if args.name:
        configs = [c for c in configs if c.name == args.name]
        if not configs:
            problems = "".join(f"\n{e}" for e in errors)
            message = f"no usable dataset named {args.name!r}{problems}"
            print(f"spark-webdataset datasets: error: {message}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.json:
        described = [
            {"dag_id": c.dag_id, "asset": c.asset_name, "file": str(c.path), **c.model_dump(mode="json")}
            for c in configs
        ]
        print(json.dumps(described[0] if args.name else described, indent=1))
    else:
        for c in configs:
            source = f"table {c.source_table}" if c.source_table else c.source
            print(f"{c.dag_id}  {c.path}: {source} -> {c.root} (schedule {c.schedule})")
    if errors and not args.name:
        print(f"spark-webdataset datasets: error: {InvalidDatasetConfigs(errors)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark-webdataset", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    validate = commands.add_parser("validate", help="open every shard of a version and check it")
    validate.add_argument("version_uri", help="ROOT/versions/VERSION")
    validate.add_argument("--workers", type=_positive_int, default=None, help="local processes (default: cores)")
    validate.add_argument("--require", action="append", default=[], help="a field every sample must have")
    validate.add_argument("--spark-master", help="check shards with a Spark job instead of a local pool")
    validate.add_argument(
        "--full", action="store_true",
        help="open every shard, the ones referenced from a parent too (default: those are proven unchanged by "
        "their size and crc32c against their own version's validation)",
    )  # fmt: skip
    validate.add_argument("--quiet", action="store_true", help="no progress bar")
    validate.add_argument(
        "--report", metavar="PATH",
        help="write the JSON report here too (a sealed or published version gets none under it: its report "
        "is the one publish relied on)",
    )  # fmt: skip
    validate.add_argument("--json", action="store_true", help=_JSON)
    validate.set_defaults(run=_validate)

    publish = commands.add_parser("publish", help="make a validated version visible; move LATEST forward")
    publish.add_argument("root")
    publish.add_argument("version")
    publish.add_argument(
        "--logical-date",
        help="ISO-8601 date the version is of (orders LATEST); default: a timestamp in the id, else now",
    )
    publish.add_argument("--allow-empty", action="store_true", help="publish a version that holds no samples")
    publish.add_argument(
        "--lock-wait",
        type=_duration,
        metavar="AGE",
        help="wait at most this long for a commit that holds the version's lock, then exit 3 (default 15m)",
    )
    publish.add_argument("--json", action="store_true", help=_JSON)
    publish.set_defaults(run=_publish)

    latest = commands.add_parser("latest", help="show LATEST, or set it by hand to a published version (undo)")
    latest.add_argument("root")
    latest.add_argument("--set", metavar="VERSION", help="point LATEST at this published version, backwards too")
    latest.add_argument("--by", default=_user(), help="who sets it (recorded in the root; default: $USER@host)")
    latest.add_argument("--json", action="store_true", help=_JSON)
    latest.set_defaults(run=_latest)

    inspect = commands.add_parser("inspect", help="versions of a dataset root, published or not, and LATEST")
    inspect.add_argument("root")
    inspect.add_argument("--json", action="store_true", help=_JSON)
    inspect.add_argument(
        "--keep-last", type=_positive_int, metavar="N", help="also show what `gc --keep-last N` would free"
    )
    inspect.add_argument("--keep-days", type=float, metavar="D", help="with --keep-last: gc's --keep-days")
    inspect.add_argument(
        "--min-age", type=_duration, default=24 * 3600.0, metavar="AGE", help="with --keep-last: gc's --min-age"
    )
    inspect.set_defaults(run=_inspect)

    gc = commands.add_parser(
        "gc", help="retire old published versions and remove dead unpublished ones (never LATEST, pins, live jobs)"
    )
    gc.add_argument("root")
    gc.add_argument(
        "--keep-last",
        type=_positive_int,
        required=True,
        metavar="N",
        help="keep the newest N published versions (publish order)",
    )
    gc.add_argument("--keep-days", type=float, metavar="D", help="also keep versions published within D days")
    gc.add_argument(
        "--min-age",
        type=_duration,
        default=24 * 3600.0,
        metavar="AGE",
        help="never touch a version younger than this (24h, 1h30m, 1.5d, 2w; default 24h)",
    )
    gc.add_argument("--dry-run", action="store_true", help="show what would go and the bytes freed; change nothing")
    gc.add_argument("--json", action="store_true", help=_JSON)
    gc.set_defaults(run=_gc)

    for name, what in (("pin", "keep a version through every gc"), ("unpin", "let gc retire a pinned version again")):
        command = commands.add_parser(name, help=what)
        command.add_argument("root")
        command.add_argument("version")
        if name == "pin":
            command.add_argument("--by", default=_user(), help="who pins it (default: $USER@host)")
            command.add_argument("--reason", help="why (recorded in the pin)")
        command.add_argument("--json", action="store_true", help=_JSON)
        command.set_defaults(run=_pin)

    datasets = commands.add_parser(
        "datasets", help="check the dataset configs (one DAG each); exit 2 naming file, field, rule of bad ones"
    )
    datasets.add_argument("name", nargs="?", help="show only this dataset")
    datasets.add_argument("--folder", help="folder of configs (default: SPARK_WEBDATASET_DATASETS, else datasets/)")
    datasets.add_argument("--json", action="store_true", help=_JSON)
    datasets.set_defaults(run=_datasets)

    cat = commands.add_parser(
        "cat", help="stream objects (local, gs:// or s3://) to stdout, e.g. for webdataset's pipe: URLs"
    )
    cat.add_argument("uri", nargs="+", help="a local path, file://, gs:// or s3:// URI")
    cat.set_defaults(run=_cat)

    get = commands.add_parser("get", help="one sample by key (one ranged read through the sample index)")
    get.add_argument("uri", help="a version directory or a dataset root (its LATEST), local, gs:// or s3://")
    get.add_argument("key")
    shown = get.add_mutually_exclusive_group()
    shown.add_argument("--field", help="write this field's bytes to stdout (default: where it lies and its fields)")
    shown.add_argument("--json", action="store_true", help="where it lies and its fields (the default output: JSON)")
    get.set_defaults(run=_get)

    demo = commands.add_parser("demo-source", help="write the scikit-learn digits demo source as parquet")
    demo.add_argument("directory")
    demo.add_argument("--files", type=_positive_int, default=8)
    demo.add_argument("--json", action="store_true", help=_JSON)
    demo.set_defaults(run=_demo_source)
    return parser


_JSON = "print the answer as JSON (shapes: docs/cli.md); errors stay one `error:` line on stderr"


def _positive_int(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return number


def _user() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def main(argv: Sequence[str] | None = None) -> int:
    """The exit code of the table in docs/cli.md (errors.py: each error's `exit_code`): 0 done, 1 the
    answer is no (a check failed, a step refused), 2 bad input, 3 a conflict, 4 no answer (storage)."""
    from .errors import WebDatasetError

    commands = parser()
    commands.add_argument("--version", action="version", version=f"spark-webdataset {_version()}")
    try:
        args = commands.parse_args(argv)
        code = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not in Python's flush at exit
        return code
    except BrokenPipeError:  # `... | head -1`: the reader has what it wanted, as for any Unix tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return EXIT_BROKEN_PIPE
    except WebDatasetError as error:
        print(f"spark-webdataset {args.command}: error: {error}", file=sys.stderr)
        return error.exit_code


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spark-webdataset")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
