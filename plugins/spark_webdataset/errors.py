"""Every error spark-webdataset raises, in one hierarchy.

Messages name the key, column, option, shard or version and the rule it
broke; callers and tests tell errors apart by type, never by text. The
module imports only the standard library, so the format core can use it too.

Errors raised inside Spark (task or driver-side Python workers) reach the
caller as Spark exceptions whose text holds the Python traceback;
`from_spark` turns such a text back into the typed error.
"""

from __future__ import annotations

import re
from pathlib import Path

# The exit codes of the CLI and the jobs: one table (docs/cli.md), each error class carries its own as
# `exit_code`, and `exit_code_of()` maps any exception to it. Airflow retries every code but 2.
EXIT_OK = 0
EXIT_FAILED = 1  # the answer is no: a check failed, a step was refused, the data breaks its rules
EXIT_BAD_INPUT = 2  # the command must change (argparse's own errors exit 2 too): no retry helps
EXIT_CONFLICT = 3  # another writer or publisher holds the lock or got there first: a retry may succeed
EXIT_NO_ANSWER = 4  # storage or the run failed before an answer (a request, a lost executor): a retry may succeed


class WebDatasetError(Exception):
    """Base of every error of ours."""

    exit_code = EXIT_FAILED


# -- bad input: the caller must change something (exit code 2) -------------


class InputError(WebDatasetError, ValueError):
    """Input, an option or an argument that cannot be accepted."""

    exit_code = EXIT_BAD_INPUT


class InvalidKey(InputError):
    """A sample key that breaks a WebDataset key rule."""


class DuplicateKey(InputError):
    """A key that appears twice in a version (within a write or across appends)."""


class InvalidField(InputError):
    """A column/field name or type that cannot become a tar member."""


class InvalidMemberName(InputError):
    """A member name that a portable USTAR header cannot hold."""


class BadOption(InputError):
    """A read/write option or command-line argument with a bad value."""


class NeedsClassicSpark(InputError):
    """A step that needs the JVM's RDD API, asked of a Spark Connect session (which sends plans only)."""


class InvalidVersionId(InputError):
    """A version id outside `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`."""


class FieldMismatch(InputError):
    """An append whose fields differ from the version's."""


class DatasetConfigError(InputError):
    """A dataset config file that cannot be used: names the file and, per problem, the field and the rule."""

    def __init__(self, path: Path | str, problems: list[tuple[str | None, str]]) -> None:
        self.path = Path(path)
        self.problems = problems
        lines = [f"field {name!r}: {rule}" if name else rule for name, rule in problems]
        if len(lines) == 1:
            super().__init__(f"{self.path}: {lines[0]}")
        else:
            listed = "\n".join(f"  {line}" for line in lines)
            super().__init__(f"{self.path}: {len(lines)} problems:\n{listed}")


class InvalidDatasetConfigs(InputError):
    """Every unusable config of a folder, one per line (the others are usable)."""

    def __init__(self, errors: list[DatasetConfigError]) -> None:
        errors = sorted(errors, key=lambda error: str(error.path))
        self.errors = errors
        count = f"{len(errors)} dataset config{'s' if len(errors) != 1 else ''}"
        super().__init__(
            f"{count} cannot be used (every other dataset's DAG loads):\n" + "\n".join(str(e) for e in errors)
        )


class NestedDatasetRoot(InputError):
    """A dataset root (or a directory written to) inside another dataset's root or a version directory.

    Raised by `layout.check_dataset_root`; `root` is the refused location and `enclosing` the
    dataset root or version directory it lies in (or, among configs, the root it holds), when known.
    """

    root: str | None = None
    enclosing: str | None = None


class NotFound(WebDatasetError):
    """A version or shard that the dataset does not have (the view answers 404)."""

    exit_code = EXIT_BAD_INPUT


# -- shards that break the format -------------------------------------------


class TarFormatError(WebDatasetError, ValueError):
    """A shard that is not a valid tar or WebDataset; names the offset (and shard, key)."""

    def __init__(self, message: str, offset: int, key: str | None = None, shard: str | None = None) -> None:
        self.message = message
        self.offset = offset
        self.key = key
        self.shard = shard
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"{self.shard}: " if self.shard else ""
        key = f" (key {self.key!r})" if self.key is not None else ""
        return f"{where}offset {self.offset}{key}: {self.message}"

    def in_shard(self, shard: str) -> TarFormatError:
        self.shard = shard
        self.args = (self._text(),)
        return self

    def __reduce__(self):  # picklable across Spark/process-pool workers
        return (type(self), (self.message, self.offset, self.key, self.shard))


class MemberSizeError(TarFormatError):
    """A header's size (octal, base-256 or PAX) past what is left of the shard or over the maximum member size."""


class BadPaxRecord(TarFormatError):
    """A PAX extended header record that does not parse (its length, its `key=value` shape, its size value)."""


# -- the versioning promise ------------------------------------------------


class PipelineError(WebDatasetError):
    """A step found the version unfit or the run's input bad; retrying will not help."""


class VersionError(WebDatasetError):
    """A version's state forbids the operation."""


class VersionSealed(VersionError):
    """A write into a sealed or published version (published versions are immutable)."""

    exit_code = EXIT_BAD_INPUT  # no retry makes a published version writable


class NotCommitted(VersionError):
    """A directory our writer staged into but whose commit never finished."""

    exit_code = EXIT_BAD_INPUT  # write the version (again) first; no retry commits it


class ConcurrentCommit(VersionError):
    """Another writer or publisher changed the version while this commit ran."""

    exit_code = EXIT_CONFLICT


class LostCommitLock(ConcurrentCommit):
    """A committer whose lease ran out and was taken over: it may no longer change the version."""


class ManifestChanged(VersionError):
    """A published version's manifest no longer matches its publish record, or a shard its manifest."""


class NoSampleIndex(VersionError):
    """A version written before spark-webdataset kept a sample index (random reads, appends need one)."""

    exit_code = EXIT_BAD_INPUT  # write the version again; no retry adds an index


class SampleMismatch(ManifestChanged):
    """A sample read by the index whose bytes are not what was written (crc32c, key or tar shape); names shard and offset."""


class CorruptIndex(ManifestChanged):
    """A sample index file that does not read as one (truncated, garbage, other columns) or a row that
    cannot be where its shard is (offset, length, location); names the file and the rule."""


class CorruptManifest(ManifestChanged):
    """A `_manifest.json` that is not one (not JSON, wrong types, negative sizes); names the file and the rule."""


class PublishRefused(VersionError):
    """Publishing was refused (not validated, invalid, or published with another manifest)."""


class RetentionRefused(VersionError):
    """gc or pin refused: a version that is not there to pin, or a root that is not a dataset."""


# -- storage -----------------------------------------------------------------


class StorageError(WebDatasetError, RuntimeError):
    """A storage operation failed; the message names the object."""

    exit_code = EXIT_NO_ANSWER


class PreconditionFailed(StorageError):
    """A create-only or compare-and-swap write found the object changed."""

    exit_code = EXIT_CONFLICT


class ChecksumMismatch(StorageError):
    """A stored object whose server-side checksum differs from the bytes the writer wrote."""


class UnsupportedScheme(StorageError, InputError):
    """A URI scheme we have no storage for."""

    exit_code = EXIT_BAD_INPUT


class MissingCredentials(StorageError, InputError):
    """gs:// without Application Default Credentials (or STORAGE_EMULATOR_HOST)."""

    exit_code = EXIT_BAD_INPUT


class S3ConfigError(MissingCredentials):
    """An s3:// setting that cannot be used: the bucket-to-profile mapping, a profile that the AWS
    config or credentials file lacks or holds badly, an endpoint that is no URL. Names the bucket,
    profile and file. A MissingCredentials: callers that handle "s3:// is not set up" catch one type."""


def exit_code_of(error: BaseException) -> int:
    """The exit code of a CLI command or job that ended with `error`: an error of ours (raised here
    or inside Spark, see `from_spark`) carries its own; anything else failed before an answer."""
    ours = from_spark(error)
    return ours.exit_code if ours is not None else EXIT_NO_ANSWER


_BY_NAME: dict[str, type[WebDatasetError]] = {}


def _collect(base: type[WebDatasetError]) -> None:
    _BY_NAME[base.__name__] = base
    for sub in base.__subclasses__():
        _collect(sub)


_TRACEBACK_LINE = re.compile(r"spark_webdataset\.errors\.(\w+): (.*)")


def from_spark(error: BaseException) -> WebDatasetError | None:
    """The error of ours behind a Spark failure (its last one in the traceback text), or None."""
    if isinstance(error, WebDatasetError):
        return error
    if not _BY_NAME:
        _collect(WebDatasetError)
    found = None
    for match in _TRACEBACK_LINE.finditer(str(error)):
        found = match
    if found is None:
        return None
    kind = _BY_NAME.get(found.group(1), WebDatasetError)
    typed = WebDatasetError.__new__(kind)
    Exception.__init__(typed, found.group(2))
    return typed
