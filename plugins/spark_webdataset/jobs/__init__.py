"""Spark jobs: build and reshard, their spark-submit entry scripts, the demo source."""
