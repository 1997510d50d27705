"""Dataset configs: one YAML file per dataset, parsed and checked without Airflow.

Each file in the datasets folder (`SPARK_WEBDATASET_DATASETS`, default
`datasets/` beside Airflow's DAGs folder) describes one dataset: where its
rows come from, where its versions go, how samples are keyed and cut into
shards, when it is built. The DAG factory (`airflow/dags.py`) turns each into one DAG.

Loading a folder never stops at a bad file: each one becomes a
`DatasetConfigError` naming the file, the field and the rule, so that
every other dataset still gets its DAG.

Values may hold `${NAME}` or `${NAME:-default}`: replaced from the
environment when the file is read (`SPARK_WEBDATASET_DATA` defaults to
`data/` beside Airflow's DAGs folder; any other unset variable without a
default is an error).
After that, a local path that is relative (`source`, `root`,
`spark.py_files`) is relative to the folder holding the config file, so
it means the same in every Airflow process whatever its working directory.
"""

from __future__ import annotations

import datetime
import difflib
import os
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..dataset.build_rules import (
    APPEND,
    ORDERS,
    Spelling,
    check_change,
    check_change_parent,
    check_order,
    check_parent,
    parse_duration,
    parse_max_shard_bytes,
    spell_duration,
)  # fmt: skip
from ..dataset.paths import check_dataset_root, normalize_uri
from ..dataset.retention import DEFAULT_MIN_AGE_SECONDS, RetentionPolicy
from ..errors import DatasetConfigError, InputError, NestedDatasetRoot
from ..format.names import control_error, field_error, field_name_error
from ..format.shard_writer import DEFAULT_MAX_SHARD_BYTES
from ..format.sizes import spell_size

DAGS_FOLDER_ENV = "AIRFLOW__CORE__DAGS_FOLDER"
DATASETS_ENV = "SPARK_WEBDATASET_DATASETS"
DATA_ENV = "SPARK_WEBDATASET_DATA"
CONFIG_SUFFIXES = (".yaml", ".yml")
DAG_ID_PREFIX = "webdataset__"
ASSET_NAME_PREFIX = "webdataset_"
SOURCE_PLACEHOLDERS = ("ds", "ds_nodash", "version")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# Each task of a dataset's DAG and how long it may run (Airflow's execution_timeout) unless the config says.
TASK_TIMEOUTS = {
    "plan": datetime.timedelta(minutes=10),
    "write_shards": datetime.timedelta(hours=6),
    "validate": datetime.timedelta(hours=3),
    "publish": datetime.timedelta(minutes=30),
    "gc": datetime.timedelta(hours=1),  # only in DAGs whose config has `retention:`
}
# A config is a page of YAML: bounds that no real one reaches keep a hostile one (a huge file, YAML
# aliases that expand to millions of copies, nesting deeper than Python's stack) from hanging the DAG
# processor, which loads every config each time it parses the DAGs.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_VALUES = 100_000
MAX_CONFIG_DEPTH = 32
# The build rules as a config spells them (the field is named by the error's location).
CONFIG_NAMES = Spelling(fix="; write parent: LATEST, or change: append")


def deployment_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """The folder holding Airflow's DAGs folder: where `datasets/` and `data/` are unless configured.

    That is the repository in a checkout (`dags/`, `datasets/`, `data/`) and
    `/opt/airflow` in Airflow's image: a rule about the deployment, not about
    where the package is, so an installed wheel finds the same folders. The
    DAGs folder is `AIRFLOW__CORE__DAGS_FOLDER`, else Airflow's own setting
    (airflow.cfg), else the working directory when Airflow is not installed.
    """
    dags = environ.get(DAGS_FOLDER_ENV)
    if not dags:
        try:
            from airflow.configuration import conf
        except ImportError:  # no Airflow: the CLI's `datasets` check, run from a shell
            return Path.cwd()
        dags = conf.get("core", "dags_folder")
    return Path(dags).expanduser().absolute().parent


def default_data_folder(environ: Mapping[str, str] = os.environ) -> str:
    """Where the demo's data lives: `SPARK_WEBDATASET_DATA`, else `data/` in the deployment folder."""
    return environ.get(DATA_ENV) or str(deployment_folder(environ) / "data")


def datasets_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """The folder of configs: `SPARK_WEBDATASET_DATASETS` (relative: to the deployment folder), else `datasets/`."""
    configured = Path(environ.get(DATASETS_ENV) or "datasets")
    return configured if configured.is_absolute() else deployment_folder(environ) / configured


def _is_local_relative(path: str) -> bool:
    return not _SCHEME.match(path) and not os.path.isabs(path)


def _resolve(path: str, info: ValidationInfo) -> str:
    """A relative local path, resolved against the config file's folder (when the loader gave one)."""
    base = (info.context or {}).get("base")
    if base is None or not _is_local_relative(path):
        return path
    return os.path.normpath(os.path.join(base, path))


class _FieldProblem(Exception):
    """A field breaks a rule pydantic cannot tie to the field (env expansion, cross-field rules)."""

    def __init__(self, where: str, rule: str) -> None:
        super().__init__(rule)
        self.where, self.rule = where, rule


def _no_control(value: str, what: str) -> str:
    problem = control_error(value)
    if problem:
        raise ValueError(f"the {what} {value!r} holds {problem}")
    return value


def _too_deep(text: str) -> bool:
    """Whether the YAML nests deeper than MAX_CONFIG_DEPTH, by its events (the parser is iterative,
    the composer recursive: a deep document costs it seconds, or Python's stack)."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_CONFIG_DEPTH:
                    return True
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return False  # safe_load names the problem and where
    return False


def _too_many_values(document: Any) -> bool:
    """Whether the parsed document holds more than MAX_CONFIG_VALUES values (YAML aliases counted per use)."""
    count, pending = 0, [document]
    while pending:
        value = pending.pop()
        count += 1
        if count > MAX_CONFIG_VALUES:
            return True
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def source_problem(value: str) -> str | None:
    """Why `value` cannot be a source URI whose placeholders a run fills in (`pipeline.render_source`), or None."""
    control = control_error(value)
    if control:
        return f"the source {value!r} holds {control}"
    try:
        parsed = [
            (name, spec, conversion)
            for _, name, spec, conversion in string.Formatter().parse(value)
            if name is not None
        ]
    except ValueError as error:
        return f"{value!r}: {error} (write {{{{ and }}}} for literal braces)"
    known = ", ".join(f"{{{name}}}" for name in SOURCE_PLACEHOLDERS)
    unknown = sorted({name for name, _, _ in parsed} - set(SOURCE_PLACEHOLDERS))
    if unknown:
        return f"unknown placeholder {{{unknown[0]}}}; a source may use {known}"
    for name, spec, conversion in parsed:
        if spec or conversion:  # `{ds:>99999999999}` would build a string of that width at run time
            return f"placeholder {{{name}}} takes no format spec or conversion; a source may use {known}"
    return None


def _empty_is_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


OptionalText = Annotated[str | None, BeforeValidator(_empty_is_none)]
"""Optional text where a blank value (`source: ""`, `schedule:   `) means unset."""


def _timeout(value: Any) -> datetime.timedelta:
    """A task's execution_timeout: a duration above zero (the one grammar: 2h, 1h30m, 1.5d, 90)."""
    return datetime.timedelta(seconds=parse_duration(value, above_zero=True))


Duration = Annotated[datetime.timedelta, BeforeValidator(_timeout)]


class SparkSettings(BaseModel):
    """How write_shards submits the job: Spark connection, conf, and the package for executors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conn_id: str = Field("spark_default", min_length=1, description="Airflow connection of the Spark master")
    conf: dict[str, str] = Field(default_factory=dict, description="spark-submit --conf NAME=VALUE")
    py_files: str | None = Field(None, description="spark-submit --py-files: comma-separated zips/eggs/.py")

    @field_validator("conf", mode="before")
    @classmethod
    def _conf_values_as_text(cls, value: Any) -> Any:
        # YAML reads `spark.executor.cores: 2` as a number and `true` as a bool; Spark wants text
        if isinstance(value, dict):
            return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
        return value

    @field_validator("py_files", mode="before")
    @classmethod
    def _py_files_as_text(cls, value: Any) -> Any:
        if isinstance(value, list):
            value = ",".join(str(item) for item in value)
        return _empty_is_none(value)

    @field_validator("py_files")
    @classmethod
    def _resolve_py_files(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        return ",".join(_resolve(part.strip(), info) for part in value.split(",") if part.strip())


class ValidationSettings(BaseModel):
    """What the validate task demands of a version beyond the WebDataset rules."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    required_fields: list[str] = Field(default_factory=list, description="fields every sample must have")
    spark_master: OptionalText = Field(None, description="validate as a Spark job on this master (big versions)")


class BuildSettings(BaseModel):
    """How each run builds its version: whole, or on a published parent (its shards referenced).

    `change: upsert|delete` needs `parent` written out (no implied LATEST): what a run changes
    should be read in the file, not known from a default.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    parent: OptionalText = Field(
        None,
        description="LATEST (the version published before the run's date: backfills build on their own "
        "past), a version id, or null: every run writes a whole version",
    )
    change: Annotated[str, BeforeValidator(lambda value: check_change(value, CONFIG_NAMES))] = Field(
        APPEND,
        description="what the source does to the parent: append (new keys), upsert (replace or add keys) "
        "or delete (remove the source's keys); upsert and delete need a parent",
    )

    @field_validator("parent")
    @classmethod
    def _parent_rule(cls, value: str | None) -> str | None:
        return check_parent(value, CONFIG_NAMES)

    @model_validator(mode="after")
    def _change_needs_parent(self) -> BuildSettings:
        check_change_parent(self.change, self.parent, CONFIG_NAMES)  # reported as the field `build`
        return self


class RetentionSettings(BaseModel):
    """Which versions the gc task (after publish) keeps; the rest is retired and its unreferenced files deleted.

    Besides these, gc always keeps LATEST, pinned versions, versions a live job writes, and the
    version the run just published.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep_last: PositiveInt = Field(description="keep the newest N published versions (LATEST always)")
    keep_days: NonNegativeFloat | None = Field(None, description="also keep versions published within D days")
    min_age: Annotated[float, BeforeValidator(parse_duration)] = Field(
        DEFAULT_MIN_AGE_SECONDS,
        description="never touch a version younger than this (e.g. 24h): an unpublished one may be "
        "waiting for another run's validate and publish",
    )

    def policy(self, **overrides: Any) -> RetentionPolicy:
        """gc's policy, with a run's `keep_last` / `keep_days` where given (keep_days None: no day rule)."""
        return RetentionPolicy(
            overrides.get("keep_last", self.keep_last), overrides.get("keep_days", self.keep_days), self.min_age
        )


class DatasetConfig(BaseModel):
    """One dataset: what its DAG reads, writes, when, and with which Spark settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the dataset's name: DAG webdataset__<name>, Asset webdataset_<name>")
    source: OptionalText = Field(None, description="Spark source URI; {ds}, {ds_nodash}, {version} are filled in")
    source_format: str = Field("parquet", min_length=1, description="any Spark format")
    source_table: OptionalText = Field(None, description="a table in the Spark catalog instead of source")
    root: str = Field(min_length=1, description="the dataset root: a local path, gs://bucket/path or s3://bucket/path")
    key: str = Field(min_length=1, description="column or SQL for each sample's key")
    fields: dict[str, str] = Field(
        default_factory=dict, description="extension -> column or SQL, in member order; empty: every column"
    )
    max_shard_bytes: str = Field(
        spell_size(DEFAULT_MAX_SHARD_BYTES), description="hard cap per shard in tar bytes, e.g. 3GiB"
    )
    max_samples_per_shard: PositiveInt | None = None
    order: str = Field("hash", description="sample order: " + ", ".join(ORDERS))
    schedule: OptionalText = Field(None, description="cron expression, preset (@daily), or null: manual runs only")
    start_date: datetime.datetime | None = None
    catchup: bool = False
    spark: SparkSettings = Field(default_factory=SparkSettings)
    validation: ValidationSettings = Field(default_factory=ValidationSettings)
    build: BuildSettings = Field(default_factory=BuildSettings)
    retention: RetentionSettings | None = Field(None, description="gc after each publish; absent: no gc task")
    retries: NonNegativeInt = 2
    timeouts: dict[str, Duration] = Field(
        default_factory=lambda: dict(TASK_TIMEOUTS),
        description="task -> its execution_timeout (e.g. write_shards: 2h); unset tasks: "
        + ", ".join(f"{task} {spell_duration(limit.total_seconds())}" for task, limit in TASK_TIMEOUTS.items()),
    )
    owner: str = Field("airflow", min_length=1)
    tags: list[str] = Field(default_factory=list)

    _path: Path | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _name_rule(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a dataset name: use 1-100 of a-z, 0-9, '_' and '-', starting with a letter or digit"
            )
        return value

    @field_validator("source")
    @classmethod
    def _source_placeholders(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        problem = source_problem(value)
        if problem:
            raise ValueError(problem)
        return _resolve(value, info)

    @field_validator("root")
    @classmethod
    def _resolve_root(cls, value: str, info: ValidationInfo) -> str:
        try:  # the path rule every entry point applies (layout.normalize_uri): refused here, naming the file
            return normalize_uri(_resolve(_no_control(value, "root"), info), "root")  # relative: to the file's folder
        except InputError as error:
            raise ValueError(str(error)) from None

    @field_validator("fields")
    @classmethod
    def _field_names(cls, value: dict[str, str]) -> dict[str, str]:
        for extension, expression in value.items():
            problem = field_error(extension) or field_name_error(extension, allow_pax=False)
            if problem:
                raise ValueError(f"extension {extension!r}: {problem}")
            if not str(expression).strip():
                raise ValueError(f"extension {extension!r}: give the column or SQL that fills it")
        return value

    @field_validator("max_shard_bytes", mode="before")
    @classmethod
    def _byte_size(cls, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"{value!r} is not a byte size (write e.g. 1048576, 512MiB, 3GiB)")
        # the job's own parser (a ValueError naming the rule); the job parses the text it is given
        parse_max_shard_bytes(value, "max_shard_bytes")
        return str(value)

    @field_validator("order")
    @classmethod
    def _order_rule(cls, value: str) -> str:
        return check_order(value, CONFIG_NAMES)

    @field_validator("timeouts")
    @classmethod
    def _timeouts_of_tasks(cls, value: dict[str, datetime.timedelta]) -> dict[str, datetime.timedelta]:
        for task in value:
            if task not in TASK_TIMEOUTS:
                close = difflib.get_close_matches(task, list(TASK_TIMEOUTS), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ValueError(f"{task!r} is not a task of the DAG; {hint}the tasks are: {', '.join(TASK_TIMEOUTS)}")
        return {**TASK_TIMEOUTS, **value}

    @field_validator("start_date", mode="before")
    @classmethod
    def _date_is_midnight(cls, value: Any) -> Any:
        if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
            return datetime.datetime(value.year, value.month, value.day)
        return value

    @field_validator("start_date")
    @classmethod
    def _naive_is_utc(cls, value: datetime.datetime | None) -> datetime.datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=datetime.timezone.utc)
        return value

    @model_validator(mode="after")
    def _cross_field_rules(self) -> DatasetConfig:
        # raised as _FieldProblem, not ValueError: pydantic would report it without a field
        if (self.source is None) == (self.source_table is None):
            both = "not both" if self.source is not None else "one is missing"
            rule = f"give exactly one of 'source' (a URI) and 'source_table' (a table); {both}"
            raise _FieldProblem("source", rule)
        if self.catchup and self.start_date is None:
            raise _FieldProblem("start_date", "required with 'catchup: true' (the first date to catch up from)")
        missing = [name for name in self.validation.required_fields if self.fields and name not in self.fields]
        if missing:
            rule = f"{missing[0]!r} is not one of the fields ({', '.join(self.fields)})"
            raise _FieldProblem("validation.required_fields", rule)
        return self

    @property
    def path(self) -> Path | None:
        """The config file this came from (None when built in code)."""
        return self._path

    @property
    def dag_id(self) -> str:
        return DAG_ID_PREFIX + self.name

    @property
    def asset_name(self) -> str:
        return ASSET_NAME_PREFIX + self.name

    @property
    def asset_uri(self) -> str:
        """The Asset's URI: the root itself when remote, file:// of its absolute path when local."""
        return self.root if "://" in self.root else "file://" + os.path.abspath(self.root)

    @property
    def field_args(self) -> list[str]:
        """The fields as the job's `--field EXT=COLUMN_OR_SQL` values, in member order."""
        return [f"{extension}={expression}" for extension, expression in self.fields.items()]


def expand_environment(value: Any, environ: Mapping[str, str], where: str = "") -> Any:
    """Replace `${NAME}` / `${NAME:-default}` in every string of a parsed YAML document."""
    if isinstance(value, dict):
        return {k: expand_environment(v, environ, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_environment(v, environ, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if name == DATA_ENV:
            return default_data_folder(environ)
        if default is not None:
            return default
        rule = f"environment variable {name} is not set (write ${{{name}:-default}} for a default)"
        raise _FieldProblem(where, rule)

    return _ENV_REFERENCE.sub(replace, value)


def _problems(error: ValidationError) -> list[tuple[str | None, str]]:
    """Pydantic's errors as (field, rule), with the known fields named for a misspelt one."""
    problems: list[tuple[str | None, str]] = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or None
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            model = DatasetConfig
            for part in item["loc"][:-1]:
                annotation = model.model_fields[str(part)].annotation
                if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                    model = annotation
            known = list(model.model_fields)
            close = difflib.get_close_matches(str(item["loc"][-1]), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            message = f"unknown field; {hint}the fields are: {', '.join(known)}"
        elif item["type"] == "missing":
            message = "required, and missing"
        problems.append((where, message))
    return problems


def load_config(path: Path | str, environ: Mapping[str, str] = os.environ) -> DatasetConfig:
    """Read, expand and check one config file; raise DatasetConfigError naming the file, field and rule."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise DatasetConfigError(
                path, [(None, f"is {size} bytes; a dataset config holds at most {MAX_CONFIG_BYTES}")]
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetConfigError(path, [(None, f"cannot be read: {error}")]) from None
    if _too_deep(text):
        raise DatasetConfigError(path, [(None, f"the YAML nests deeper than {MAX_CONFIG_DEPTH} levels")])
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise DatasetConfigError(path, [(None, f"{where}not valid YAML: {problem}")]) from None
    except RecursionError:
        raise DatasetConfigError(path, [(None, "not valid YAML here: it nests too deeply")]) from None
    if _too_many_values(document):
        rule = f"the document holds more than {MAX_CONFIG_VALUES} values (YAML aliases count once per use)"
        raise DatasetConfigError(path, [(None, rule)])
    if document is None:
        document = {}
    if not isinstance(document, dict):
        rule = f"the file must hold a mapping of fields (name, source, root, ...), not a {type(document).__name__}"
        raise DatasetConfigError(path, [(None, rule)])
    document.setdefault("name", path.stem)
    try:
        document = expand_environment(document, environ)
        config = DatasetConfig.model_validate(document, context={"base": str(path.parent.resolve())})
    except _FieldProblem as error:
        raise DatasetConfigError(path, [(error.where or None, error.rule)]) from None
    except ValidationError as error:
        raise DatasetConfigError(path, _problems(error)) from None
    config._path = path
    return config


@dataclass(frozen=True)
class LoadedConfigs:
    """A folder's usable configs, and one error per file that is not."""

    folder: Path
    configs: list[DatasetConfig] = field(default_factory=list)
    errors: list[DatasetConfigError] = field(default_factory=list)


def config_files(folder: Path) -> list[Path]:
    """The config files of a folder, in name order (hidden files left out)."""
    return sorted(
        p for p in folder.iterdir() if p.suffix in CONFIG_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )


def load_folder(folder: Path | str | None = None, environ: Mapping[str, str] = os.environ) -> LoadedConfigs:
    """Load every config of the folder; a bad file becomes an error and the others still load.

    Two files may not share a name (it names the DAG and the Asset) nor a
    root (two DAGs would publish into one dataset), and no file's root may
    lie inside another's (in its versions/ or anywhere below it): one DAG
    would write into the other's dataset. The later file, in name order, is
    the one refused. Paths only: nothing is read from storage here (this
    runs each time Airflow parses the DAGs).
    """
    folder = Path(folder) if folder is not None else datasets_folder(environ)
    try:
        problem = None if folder.is_dir() else "the datasets folder does not exist"
    except OSError as error:  # a name too long, a NUL: is_dir answers only "no such folder" by False
        problem = f"the datasets folder cannot be looked at ({error.strerror or error})"
    if problem is not None:
        problem += f" (set {DATASETS_ENV} to the folder of dataset configs)"
        return LoadedConfigs(folder, errors=[DatasetConfigError(folder, [(None, problem)])])
    loaded = LoadedConfigs(folder)
    by_name: dict[str, DatasetConfig] = {}
    by_root: dict[str, DatasetConfig] = {}
    for path in config_files(folder):
        try:
            config = load_config(path, environ)
        except DatasetConfigError as error:
            loaded.errors.append(error)
            continue
        root = config.asset_uri.rstrip("/")
        if config.name in by_name:
            other = by_name[config.name].path
            rule = (
                f"{config.name!r} is also the name of {other.name}; "
                "each dataset needs its own (it names the DAG and the Asset)"
            )
            loaded.errors.append(DatasetConfigError(path, [("name", rule)]))
        elif root in by_root:
            other = by_root[root].path
            rule = f"{config.root!r} is also the root of {other.name}; two DAGs cannot publish into one dataset"
            loaded.errors.append(DatasetConfigError(path, [("root", rule)]))
        elif nested := _nested_root(config, loaded.configs):
            loaded.errors.append(DatasetConfigError(path, [("root", nested)]))
        else:
            by_name[config.name] = by_root[root] = config
            loaded.configs.append(config)
    return loaded


def _nested_root(config: DatasetConfig, accepted: list[DatasetConfig]) -> str | None:
    """Why `config`'s root nests with the root of an accepted config (naming its file), or None."""
    try:
        check_dataset_root(config.root, [other.root for other in accepted], look=False)
    except NestedDatasetRoot as error:
        other = next(other for other in accepted if other.root == error.enclosing)
        return f"{error} ({other.root!r} is the root of {other.path.name if other.path else other.name})"
    return None
