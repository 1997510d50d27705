"""The versioning promise: layout, lock, commit protocol, validate, publish, catalog (no Spark, no Airflow)."""
