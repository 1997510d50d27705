"""Docs that run: every code block of README.md and docs/*.md, in order, against a small real world.

Python blocks run (one namespace a document, as a reader pastes them one after another); yaml blocks
load as dataset configs; shell lines run through the real CLI and spark-submit, or, when they are a
synopsis (`ROOT`, `V`, `[--flag]`, `...`), have every flag checked against the command's own parser.
Paths are moved into the world: `data/` into a temporary folder, `gs://bucket` onto the GCS emulator,
`/other` and `/data/other` onto a folder of 42 tars. What needs a cloud, a cluster or a long-lived
service is a placeholder below, each with the test that covers it instead; a placeholder that matches
no block fails, so the list cannot go stale.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.doc_blocks import (
    DOCUMENTS,
    Block,
    blocks,
    flags,
    is_synopsis,
    shell_commands,
    without_optional_parts,
)

# (document, text the block holds): why it is not run here, and what runs it instead.
PLACEHOLDERS: dict[tuple[str, str], str] = {
    (
        "README.md",
        "make test   #",
    ): "the two commands themselves: CI runs `make test`; tests/e2e/test_dag_runs.py runs the demo DAG",
    ("README.md", "scripts/airflow_standalone.sh"): "a long-lived server: tests/e2e/test_airflow_standalone_script.py",
    (
        "docs/airflow.md",
        "scripts/airflow_standalone.sh",
    ): "a long-lived server: tests/e2e/test_airflow_standalone_script.py",
    (
        "docs/airflow.md",
        "airflow backfill create",
    ): "a scheduler's backfill: tests/e2e/test_dag_runs.py backfills three dates",
    ("docs/airflow.md", "python -m build --wheel"): "builds and installs a wheel: tests/e2e/test_installed_wheel.py",
    ("docs/gcs.md", "export STORAGE_EMULATOR_HOST"): "starts nothing here: the test session's emulator is that server",
    (
        "docs/s3.md",
        "wids = wids_through_storage()",
    ): "an s3:// bucket's published version: tests/integration/test_consumer_cloud.py reads one through it",
    (
        "docs/scale.md",
        "gcloud dataproc",
    ): "needs a Dataproc cluster: its flags are the build job's, checked in docs/scale.md's synopsis",
    (
        "docs/scale.md",
        "scripts/build_pyfiles.sh",
    ): "a cluster's --py-files: tests/e2e/test_cluster.py builds and ships the zip",
    (
        "docs/streaming-and-connect.md",
        "sc://spark-connect:15002",
    ): "needs a Spark Connect server: tests/e2e/test_spark_connect.py",
    (
        "docs/streaming-and-connect.md",
        "SPARK_REMOTE=sc://host:15002",
    ): "needs a Spark Connect server: tests/e2e/test_spark_connect.py",
}
IMAGES_KEYS = 120  # keys 00000000..00000119: README's `get("00000042")` and `keyPrefix "0001"` find samples


@dataclass
class World:
    work: Path
    bucket: str
    namespace_base: dict = field(default_factory=dict)
    namespace_by_document: dict[str, dict] = field(default_factory=dict)

    def substitute(self, text: str) -> str:
        text = text.replace("gs://bucket/incoming/", f"{self.work}/incoming/")  # Spark's parquet has no gs:// here
        text = text.replace("gs://bucket/checkpoints/", f"{self.work}/checkpoints/")
        text = text.replace("gs://bucket", self.bucket)
        text = re.sub(r'(?<=["\s])/data/other/', f"{self.work}/other/", text)
        text = re.sub(r'(?<=["\s])/other/', f"{self.work}/other/", text)
        return re.sub(r'(?<=["\s])data/', f"{self.work}/data/", text)

    def namespace(self, document: str) -> dict:
        return {**self.namespace_base, **self.namespace_by_document.get(document, {})}


def _images(spark, count: int = IMAGES_KEYS):
    return spark.range(count).selectExpr(
        "id", "unhex(sha2(cast(id AS string), 256)) AS image", "CAST(id % 10 AS INT) AS label"
    )


def _publish_images(spark, root: str, version: str) -> None:
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    (_images(spark).selectExpr("format_string('%08d', id) AS __key__", "image AS jpg", "label AS cls")
        .write.format("webdataset").mode("overwrite").save(f"{root}/versions/{version}"))  # fmt: skip
    assert validate_version(f"{root}/versions/{version}", workers=1).ok
    publish(root, version)


@pytest.fixture(scope="module")
def world(spark, gcs_emulator, tmp_path_factory) -> World:
    import pyspark.sql.functions as F

    import spark_webdataset
    from spark_webdataset.jobs.demo import write_digits_source

    work = tmp_path_factory.mktemp("docs-world")
    bucket = f"docs-world-{os.getpid()}"
    gcs_emulator.create_bucket(bucket)
    bucket = f"gs://{bucket}"
    world = World(work, bucket)
    images = f"{work}/data/datasets/images"
    for version in ("2026-11-01", "2026-11-30"):
        _publish_images(spark, images, version)
    _publish_images(spark, f"{bucket}/datasets/images", "2026-11-30")
    _publish_images(spark, f"{bucket}/datasets/imagenet", "2026-11-30")
    _publish_images(spark, f"{bucket}/data/datasets/digits", "2026-11-30")
    write_digits_source(f"{work}/data/demo/digits", files=2)
    (_images(spark, 42).selectExpr("format_string('%08d', id) AS __key__", "image AS jpg")
        .write.format("webdataset").option("maxSamplesPerShard", 1).mode("overwrite").save(f"{work}/other"))  # fmt: skip
    _images(spark, 20).selectExpr("format_string('%08d', id) AS __key__", "image AS jpg", "label AS cls").write.parquet(
        f"{work}/incoming"
    )
    digits = f"{work}/data/datasets/digits"
    from tests.support.webdataset_ui_data import published_digits

    published_digits(digits, "20261201T000000Z")
    df = _images(spark)
    world.namespace_base = {
        "spark": spark, "spark_webdataset": spark_webdataset, "df": df, "F": F,
        "root": images, "uri": f"{digits}/versions/20261201T000000Z", "v": f"{images}/versions/2026-12-02",
        "keys_df": df.selectExpr("format_string('%08d', id) AS __key__").limit(3),
        "gs_shard_urls": [f"{bucket}/datasets/images/versions/2026-11-30/shard-000000.tar"],
    }  # fmt: skip
    # Where a document's `df` is already samples (`__key__` and fields): gs.md's, and versions.md's with
    # keys new to LATEST (a child appends them)
    as_samples = ("format_string('%08d', id) AS __key__", "image AS jpg", "label AS cls")
    world.namespace_by_document["docs/gcs.md"] = {"df": df.selectExpr(*as_samples)}
    world.namespace_by_document["docs/versions.md"] = {
        "df": _images(spark, 200).where("id >= 150").selectExpr(*as_samples)
    }
    return world


def _placeholder(block: Block) -> str | None:
    document = str(block.path.relative_to(REPO))
    for (where, text), reason in PLACEHOLDERS.items():
        if where == document and text in block.text:
            return reason
    return None


def _run_python(block: Block, world: World, namespace: dict, spark) -> None:
    code = compile(world.substitute(block.text), block.where, "exec")
    exec(code, namespace)  # noqa: S102 - the docs' own code, as a reader runs it
    for query in spark.streams.active:  # a stream the block started: let it take what is there, then stop
        query.processAllAvailable()
        query.stop()


def _run_yaml(block: Block, world: World) -> None:
    from spark_webdataset.airflow.configs import load_config

    config = world.work / "configs" / f"block-{block.line}.yaml"
    config.parent.mkdir(exist_ok=True)
    config.write_text(world.substitute(block.text))
    loaded = load_config(config, {**os.environ, "SPARK_WEBDATASET_DATA": str(world.work / "data")})
    assert loaded.root.startswith(str(world.work)), (block.where, loaded.root)


def _parser_of(words: list[str]) -> argparse.ArgumentParser | None:
    """The parser a documented command line goes through, or None for a command we do not own."""
    from spark_webdataset import cli
    from spark_webdataset.jobs import build, reshard

    if words[0] == "spark-webdataset" and len(words) > 1:
        return cli.parser()._subparsers._group_actions[0].choices.get(words[1])
    scripts = {"build_webdataset.py": build.parser, "reshard.py": reshard.parser}
    for word in words[1:4]:
        for script, make in scripts.items():
            if script in word:
                return make()
    return None


def _check_flags(block: Block, words: list[str]) -> None:
    parser = _parser_of(words)
    known = {option for action in parser._actions for option in action.option_strings}
    unknown = [flag for flag in flags(words) if flag not in known]
    assert not unknown, f"{block.where}: {shlex.join(words)!r} names flags its command does not take: {unknown}"


def _run_shell(block: Block, world: World) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    for words in shell_commands(world.substitute(block.text)):
        command = shlex.join(words)
        if _parser_of(words) is not None:
            _check_flags(block, words)
        if is_synopsis(words):
            assert _parser_of(words) is not None, (
                f"{block.where}: a synopsis of a command the runner does not know: {command}"
            )
            continue
        words = without_optional_parts(words)
        if words[0] == "spark-webdataset":
            argv = [sys.executable, "-m", "spark_webdataset.cli", *words[1:]]
        elif words[0] == "spark-submit":
            argv = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", *words[1:]]
        else:
            raise AssertionError(f"{block.where}: the runner does not know how to run {command!r}; add a placeholder")
        result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{block.where}: {command}\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_block_of_the_document_runs(document: Path, world: World, spark) -> None:
    namespace = world.namespace(str(document.relative_to(REPO)))
    ran = 0
    for block in blocks(document):
        if _placeholder(block) is not None:
            continue
        if block.language == "python":
            _run_python(block, world, namespace, spark)
        elif block.language == "yaml":
            _run_yaml(block, world)
        elif block.language in ("bash", "sh"):
            _run_shell(block, world)
        else:
            raise AssertionError(f"{block.where}: a ```{block.language} block the runner cannot check")
        ran += 1
    print(f"{document.relative_to(REPO)}: {ran} blocks run or checked")


def test_every_placeholder_names_a_block() -> None:
    for (where, text), reason in PLACEHOLDERS.items():
        matching = [b for b in blocks(REPO / where) if text in b.text]
        assert len(matching) == 1, f"placeholder ({where}, {text!r}) matches {len(matching)} blocks: {reason}"
