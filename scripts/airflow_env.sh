# Sourced by scripts and the Makefile: Airflow and Spark on the embedded
# default (SQLite under airflow_home/, local Spark, data under data/).
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$REPO/.venv/bin:$PATH"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$REPO/airflow_home}"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$REPO/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-{\"conn_type\": \"spark\", \"host\": \"local[*]\"\}}"
export PYSPARK_PYTHON="$REPO/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$REPO/.venv/bin/python"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
export SPARK_WEBDATASET_DATA="${SPARK_WEBDATASET_DATA:-$REPO/data}"
export SPARK_WEBDATASET_DATASETS="${SPARK_WEBDATASET_DATASETS:-$REPO/datasets}"  # one YAML per dataset -> one DAG
# A task's first call to the execution API can take 10-19 s to be answered on a
# cold machine; the default timeout (5 s) fails the task.
export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT="${AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT:-60}"
