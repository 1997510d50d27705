"""The test helpers with a server or Spark: the emulator starts when its first port is taken, a stopped
fault proxy lets nothing through, failed_task_attempts counts what Spark counts.
"""

from __future__ import annotations

import http.client
import socket
import urllib.request

import pytest

from tests.support import gcs_emulator
from tests.support.fault_proxy import FaultPlan, FaultProxy


def test_emulator_starts_when_its_first_port_is_taken_before_it_binds(monkeypatch) -> None:
    # what the race looks like: free_port() returned a port, then another process bound it
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    taken = squatter.getsockname()[1]
    picks = iter([[taken]])
    real = gcs_emulator.free_ports
    monkeypatch.setattr(gcs_emulator, "free_ports", lambda count: next(picks, None) or real(count))
    emulator = gcs_emulator.Emulator()
    try:
        assert emulator.port != taken
        with urllib.request.urlopen(f"{emulator.url}/storage/v1/b", timeout=5) as response:
            assert response.status == 200
        assert "address already in use" in emulator.log_path.read_text()  # the first attempt did hit the race
    finally:
        emulator.stop()
        squatter.close()


def test_stopped_proxy_lets_nothing_through_a_kept_alive_connection(gcs_emulator) -> None:
    plan = FaultPlan(rate=0)
    proxy = FaultProxy(gcs_emulator.url, plan)
    port = int(proxy.url.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/storage/v1/b")
        response = connection.getresponse()
        response.read()
        assert response.status == 200 and not response.will_close  # kept alive
        proxy.stop()
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            connection.request("GET", "/storage/v1/b")
            connection.getresponse().read()
        assert plan.requests == 1
    finally:
        connection.close()
        proxy.stop()


def test_failed_task_attempts_counts_what_spark_counts(spark) -> None:
    """The count comes from Spark's scheduler (no code under test): a UDF fails the first attempt
    of partition 1, the retry succeeds; a clean job counts 0; the caller's job group is kept."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    from tests.support.helpers import failed_task_attempts

    @udf("long")
    def first_attempt_of_partition_1_fails(value):  # no type hints: pyspark would warn
        context = TaskContext.get()
        if context.partitionId() == 1 and context.attemptNumber() == 0:
            raise RuntimeError("first attempt fails")
        return value

    frame = spark.range(0, 40, numPartitions=3)
    context = spark.sparkContext
    context.setJobGroup("callers-group", "the caller's")
    try:
        failing = frame.select(first_attempt_of_partition_1_fails("id"))
        assert failed_task_attempts(spark, failing.collect) == 1
        assert failed_task_attempts(spark, frame.collect) == 0
        assert context.getLocalProperty("spark.jobGroup.id") == "callers-group"
    finally:
        for name in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            context.setLocalProperty(name, None)
    assert context.getLocalProperty("spark.jobGroup.id") is None
