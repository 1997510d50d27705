"""Two S3 stores in one job, and keys from STS: a bucket mapped to an AWS profile
(SPARK_WEBDATASET_S3_BUCKET_PROFILES) is read and written on its profile's endpoint, a second moto
server started as the session's first, while every other bucket stays on the process-wide endpoint;
web identity (EKS IRSA) gets its keys from the moto server's real STS AssumeRoleWithWebIdentity.
The container endpoint below is a small local server speaking its documented protocol
(tests/support/credential_endpoints.py): no real one exists off AWS."""

from __future__ import annotations

import json
import socket
import textwrap
import time

import pytest

from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import read_latest
from spark_webdataset.errors import MissingCredentials
from spark_webdataset.storage import storage_for
from spark_webdataset.storage.s3 import S3Client, client_for
from spark_webdataset.storage.s3_config import BUCKET_PROFILES, Settings, settings
from tests.support import REPO
from tests.support.credential_endpoints import CredentialEndpoint
from tests.support.fenced_committer import published
from tests.support.helpers import run_cli, run_python
from tests.support.s3_server import S3Server

REGION = "eu-west-1"  # the second store's, from its profile (the session's is us-east-1)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def second_server(s3_server):
    server = S3Server(f"http://127.0.0.1:{_free_port()}")
    yield server
    server.stop()


@pytest.fixture
def two_stores(s3_bucket, second_server, monkeypatch, tmp_path) -> tuple[str, str]:
    """(a bucket on the session's server, a bucket mapped to profile `other` on the second server)."""
    other = f"other-{s3_bucket[len('s3://') :]}"[:63].rstrip("-")
    (tmp_path / "config").write_text(
        f"[profile other]\ns3 =\n  endpoint_url = {second_server.url}\nregion = {REGION}\n"
    )
    (tmp_path / "credentials").write_text("[other]\naws_access_key_id = OTHER\naws_secret_access_key = other\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv(BUCKET_PROFILES, f"{other}=other")
    body = ('<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<LocationConstraint>{REGION}</LocationConstraint></CreateBucketConfiguration>")  # fmt: skip
    # made on the second server directly: a request for it sent anywhere else meets NoSuchBucket
    response = S3Client(Settings(None, second_server.url, REGION)).request("PUT", other, body=body.encode())
    assert response.status == 200, response.body[:300]
    return s3_bucket, f"s3://{other}"


def _bucket_exists_on(settings_: Settings, bucket: str) -> bool:
    response = S3Client(settings_).request("GET", bucket, query={"list-type": "2"})
    assert response.status in (200, 404), response.body[:300]
    return response.status == 200


def test_each_bucket_round_trips_on_its_own_endpoint(two_stores, second_server) -> None:
    first, second = two_stores
    second_name = second[len("s3://") :]
    mapped = client_for(second_name)
    assert (mapped.endpoint, mapped.region, mapped.credentials.access_key) == (second_server.url, REGION, "OTHER")
    for bucket in (first, second):
        storage = storage_for(bucket)
        payload = bucket.encode() * 1000
        with storage.open_write(f"{bucket}/dir/a.bin") as stream:
            stream.write(payload)
        storage.create_only(f"{bucket}/dir/b.json", b"{}")
        storage.rename_new(f"{bucket}/dir/a.bin", f"{bucket}/final/a.bin")
        assert storage.read_bytes(f"{bucket}/final/a.bin") == payload
        assert storage.list_sizes(f"{bucket}/dir") == {"b.json": 2}
    process_wide = settings(None)
    assert process_wide.endpoint != second_server.url
    assert not _bucket_exists_on(process_wide, second_name)  # the mapped bucket is only on the second server
    assert not _bucket_exists_on(settings(second_name), first[len("s3://") :])
    assert _bucket_exists_on(settings(second_name), second_name)


def test_the_cli_validates_publishes_and_inspects_each_store(two_stores) -> None:
    for bucket in two_stores:
        root = f"{bucket}/ds"
        uri = Dataset(root).version("v1").uri
        published(root, "v1", samples=7)
        for command in (("validate", uri, "--workers", "1", "--quiet"), ("inspect", root, "--json")):
            done = run_cli(*command)  # a process of its own: the variables and files are all it has
            assert done.returncode == 0, (command, done.stderr[-2000:])
        assert [v["version"] for v in json.loads(done.stdout)["versions"]] == ["v1"], done.stdout


SPARK_JOB = """
import sys
from pyspark.sql import SparkSession
import spark_webdataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version

first, second = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark_webdataset.register(spark)
frame = spark.range(40).selectExpr("format_string('k%03d', id) AS __key__", "concat('text ', id) AS txt")
frame.repartition(2).write.format("webdataset").mode("overwrite").save(f"{first}/ds/versions/v1")
read = spark.read.format("webdataset").schema("__key__ string, txt string").load(f"{first}/ds/versions/v1")
read.repartition(2).write.format("webdataset").mode("overwrite").save(f"{second}/ds/versions/v1")
assert validate_version(f"{second}/ds/versions/v1", workers=1).ok
publish(f"{second}/ds", "v1")
spark.stop()
"""


@pytest.mark.slow
def test_spark_writes_on_one_store_and_publishes_its_copy_on_the_other(two_stores, tmp_path) -> None:
    first, second = two_stores
    done = run_python(textwrap.dedent(SPARK_JOB), first, second, cwd=REPO)  # workers inherit the variables
    assert done.returncode == 0, done.stderr[-4000:]
    assert read_latest(f"{second}/ds") == "v1"
    shards = storage_for(second).list_sizes(f"{second}/ds/versions/v1")
    assert "_manifest.json" in shards and any(name.endswith(".tar") for name in shards)
    assert not _bucket_exists_on(settings(None), second[len("s3://") :])
    run = run_cli("get", f"{second}/ds", "k017", "--field", "txt")
    assert run.returncode == 0 and run.stdout == "text 17", run.stderr[-2000:]


def test_a_mapped_profile_with_a_role_asks_the_sts_of_its_own_endpoint(
    two_stores, second_server, monkeypatch, tmp_path
) -> None:
    second = two_stores[1]
    (tmp_path / "token").write_text("a-service-account-token")
    with open(tmp_path / "config", "a") as config:
        config.write(f"[profile irsa]\nendpoint_url = {second_server.url}\nrole_arn = arn:aws:iam::123456789012:role/r\n"
                     f"web_identity_token_file = {tmp_path / 'token'}\nregion = {REGION}\n")  # fmt: skip
    monkeypatch.setenv(BUCKET_PROFILES, f"{second[len('s3://') :]}=irsa")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")  # the process-wide STS: never asked for it
    credentials = client_for(second[len("s3://") :]).credentials
    assert credentials.access_key.startswith("ASIA") and credentials.token
    storage_for(second).create_only(f"{second}/role.json", b"{}")
    assert storage_for(second).read_bytes(f"{second}/role.json") == b"{}"


@pytest.fixture
def web_identity(monkeypatch, tmp_path) -> None:
    """No keys anywhere but a web identity token and a role, as a Kubernetes service account has."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", BUCKET_PROFILES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / "token").write_text("eyJhbGciOiJSUzI1NiJ9.a-service-account-token.sig\n")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/spark-writer")
    monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "spark-job")


def test_web_identity_keys_come_from_sts_before_the_container_endpoint(s3_bucket, web_identity, monkeypatch) -> None:
    container = CredentialEndpoint("container")  # set up too: web identity comes first in the chain
    try:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", container.url + "/creds")
        credentials = client_for(s3_bucket[len("s3://") :]).credentials
        assert credentials.access_key.startswith("ASIA") and credentials.token  # STS's session keys
        assert 3000 < credentials.expires - time.time() <= 3600
        storage = storage_for(s3_bucket)
        storage.create_only(f"{s3_bucket}/irsa.json", b"[]")
        assert storage.read_bytes(f"{s3_bucket}/irsa.json") == b"[]"
        assert container.requests == []
        published(f"{s3_bucket}/ds", "v1", samples=3)
        done = run_cli("inspect", f"{s3_bucket}/ds", "--json")  # a fresh process asks STS itself
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        container.stop()


def test_web_identity_keys_are_refreshed_from_sts_before_they_expire(s3_server, web_identity) -> None:
    class Clock:
        now = time.time()

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    s3 = S3Client(clock=clock)
    first = s3.credentials
    clock.now += 3000
    assert s3.credentials == first  # fresh for 3600 s: no new request
    clock.now += 400  # within 300 s of expiry
    refreshed = s3.credentials
    assert refreshed.access_key != first.access_key and refreshed.expires > clock.now


def test_an_unreadable_token_file_is_missing_credentials_naming_it(web_identity, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tmp_path / "gone"))
    with pytest.raises(MissingCredentials, match=r"web identity .*spark-writer.*gone.*cannot read"):
        S3Client()
