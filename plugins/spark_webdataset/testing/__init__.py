"""Support for testing spark-webdataset and code built on it (like `pyspark.testing`)."""
