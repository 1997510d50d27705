"""storage/s3.py signs its own requests (SigV4): the moto server accepts any signature, so the
signatures are checked here against botocore's, from the S3 server's venv (.venv/s3server, where
botocore lives: it cannot share the project's venv, see docs/s3.md)."""

from __future__ import annotations

import datetime
import json
import subprocess

import pytest

from spark_webdataset.storage.s3 import S3Client
from tests.support.s3_server import moto_server_binary

BOTOCORE_SIGNS = r"""
import json, sys, datetime
from unittest import mock
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
case = json.load(sys.stdin)
request = AWSRequest(method=case["method"], url=case["url"], headers=case["headers"], params=case["params"], data=b"")
class Unsigned(S3SigV4Auth):
    def payload(self, request):
        return "UNSIGNED-PAYLOAD"  # what storage/s3.py sends: the body's integrity is its crc32c header
fixed = datetime.datetime(2026, 12, 5, 15, 4, 5)
with mock.patch("botocore.auth.get_current_datetime", return_value=fixed):
    Unsigned(Credentials(*case["credentials"]), "s3", case["region"]).add_auth(request)
print(json.dumps({k: v for k, v in request.headers.items()}))
"""

CASES = [
    ("GET", "ds/versions/v1/shard-000000.tar", {}, {"Range": "bytes=0-9"}),
    (
        "PUT",
        "ds/_published/v 1+x~é.json",
        {},
        {"x-amz-checksum-crc32c": "AAAAAA==", "x-amz-sdk-checksum-algorithm": "CRC32C"},
    ),
    ("GET", "", {"list-type": "2", "prefix": "ds/a b/", "delimiter": "/", "continuation-token": "1/a+b=="}, {}),
    (
        "PUT",
        "ds/final.tar",
        {"partNumber": "1", "uploadId": "x/y+z"},
        {"x-amz-copy-source": "/bucket/ds/staged%20a.tar"},
    ),
]


@pytest.mark.parametrize("token", [None, "session-token/with+chars"])
@pytest.mark.parametrize("method, key, query, headers", CASES)
def test_signatures_are_botocores(monkeypatch, method, key, query, headers, token) -> None:
    python = moto_server_binary().parent / "python"
    if not python.exists():
        pytest.skip(f"{python}: no S3 server venv (scripts/install_s3server.sh)")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.example.test:9000")
    if token:
        monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    else:
        monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    s3 = S3Client()
    url, host, path, canonical_query = s3.url("bucket", key, query)
    ours = s3._signed(method, host, path, canonical_query, dict(headers), datetime.datetime(2026, 12, 5, 15, 4, 5))
    # botocore signs every header it is given: give it the ones we sign (host, x-amz-*), no others
    signed = {k: v for k, v in ours.items() if k.lower().startswith("x-amz-") and k.lower() != "x-amz-date"}
    # the query as parameters: botocore encodes them itself, so our encoding is checked, not echoed
    case = {"method": method, "url": url.split("?")[0], "params": query, "headers": signed, "region": "eu-west-3",
            "credentials": ["AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token]}  # fmt: skip
    theirs = json.loads(subprocess.run([str(python), "-c", BOTOCORE_SIGNS], input=json.dumps(case), capture_output=True,
                                       text=True, check=True).stdout)  # fmt: skip
    assert ours["Authorization"] == theirs["Authorization"]
