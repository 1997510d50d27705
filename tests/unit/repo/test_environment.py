"""The pyspark / pyspark-client trap: one version, or data sources break quietly."""

from importlib import metadata

import pyspark


def test_pyspark_and_pyspark_client_are_one_version() -> None:
    assert metadata.version("pyspark") == metadata.version("pyspark-client") == pyspark.__version__


def test_the_data_source_api_we_build_on_is_there() -> None:
    from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

    assert DataSourceArrowWriter.write and WriterCommitMessage
