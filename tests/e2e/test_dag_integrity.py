"""The DAG processor (a real run on the Airflow database) keeps the good datasets scheduled when one
config is bad. Parsing without a database: tests/unit/airflow/test_dags_integrity.py.
"""

from __future__ import annotations

from tests.support import DAGS
from tests.support.dataset_dags import ERRORS_FILE, write_config


def test_the_dag_processor_keeps_the_good_datasets_scheduled(airflow_db, tmp_path, monkeypatch) -> None:
    """What the DAG processor writes for the bag: the good DAG active, the error on the file holding no DAG."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.dag import DagModel
    from airflow.models.errors import ParseImportError
    from airflow.utils.session import create_session
    from sqlalchemy import select

    write_config(tmp_path, "kept", source="/raw/kept", root="/out/kept", key="id")
    write_config(tmp_path, "refused", source="/raw/{day}", root="/out/refused", key="id")
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(tmp_path))
    bag = BundleDagBag(dag_folder=str(DAGS), bundle_path=DAGS, bundle_name="dags-folder")
    DagBundlesManager().sync_bundles_to_db()  # the bundle's row, as the processor has it
    sync_bag_to_db(bag, "dags-folder", None)
    with create_session() as session:
        kept = session.scalar(select(DagModel).where(DagModel.dag_id == "webdataset__kept"))
        assert (kept.is_stale, kept.has_import_errors, kept.relative_fileloc) == (
            False,
            False,
            "webdataset_datasets.py",
        )
        [error] = session.scalars(select(ParseImportError).where(ParseImportError.bundle_name == "dags-folder")).all()
        assert error.filename == ERRORS_FILE
        assert f"{tmp_path / 'refused.yaml'}: field 'source': unknown placeholder {{day}}" in error.stacktrace
