"""The test helpers of tests/support/ (GCS emulator launcher, fault proxy) without a server: free ports tried again while taken,
the fault proxy's object names and rules. With the emulator and Spark: tests/integration/test_test_helpers.py.
"""

from __future__ import annotations

import pytest

from tests.support import gcs_emulator
from tests.support.fault_proxy import FaultRule, object_name


def test_start_on_free_ports_tries_new_ports_while_they_are_taken() -> None:
    tried = []

    def start(first: int, second: int) -> str:
        tried.append((first, second))
        if len(tried) < 3:
            raise gcs_emulator.PortTaken("taken")
        return "up"

    assert gcs_emulator.start_on_free_ports(start, count=2, attempts=5) == "up"
    assert len(tried) == 3 and all(a != b for a, b in tried)
    with pytest.raises(RuntimeError, match="3 attempts"):
        gcs_emulator.start_on_free_ports(lambda port: (_ for _ in ()).throw(gcs_emulator.PortTaken("x")), attempts=3)


def test_object_name_of_each_request_shape() -> None:
    assert object_name("/storage/v1/b/bk/o/ds%2F_published%2Fv1.json?alt=json", b"") == "ds/_published/v1.json"
    assert object_name("/download/storage/v1/b/bk/o/ds%2FLATEST?alt=media", b"") == "ds/LATEST"
    assert object_name("/upload/storage/v1/b/bk/o?uploadType=media&name=ds%2FLATEST", b"") == "ds/LATEST"
    multipart = (
        b'--==0==\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n{"name": "ds/_published/v\\"1.json"}'
        b'\r\n--==0==\r\ncontent-type: application/octet-stream\r\n\r\n{"name": "not this"}\r\n--==0==--'
    )
    assert object_name("/upload/storage/v1/b/bk/o?uploadType=multipart&ifGenerationMatch=0", multipart) == (
        'ds/_published/v"1.json'
    )
    assert object_name("/storage/v1/b/bk/o?prefix=ds%2F", b"") is None  # a listing


def test_rule_matches_method_object_precondition_and_only_its_first_times() -> None:
    rule = FaultRule("drop_after_effect", object=r"(^|/)LATEST$", method="POST", precondition="update", times=1)
    update, create = {"ifGenerationMatch": ["17"]}, {"ifGenerationMatch": ["0"]}
    assert not rule.matches("POST", "ds/LATEST", create)
    assert not rule.matches("POST", "ds/LATEST", {})
    assert not rule.matches("GET", "ds/LATEST", update)
    assert not rule.matches("POST", "ds/LATEST.tmp", update)
    assert not rule.matches("POST", None, update)
    assert rule.matches("POST", "ds/LATEST", update)
    rule.hits.append("one")
    assert not rule.matches("POST", "ds/LATEST", update)  # `times` used up
    assert FaultRule("503", precondition="create").matches("PUT", "x", create)
