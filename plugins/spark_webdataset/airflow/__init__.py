"""Airflow: dataset configs, the DAG factory, pipeline steps, the consumer and the view."""
