"""storage/s3_config.py: a bucket mapped to a profile takes its endpoint, region and keys from the
AWS config and credentials files; other buckets keep the process-wide settings (now also the
default profile's endpoint_url and region); the credential chain's order; temporary keys are
refreshed before they expire. The container endpoint and instance metadata are small local
servers speaking the documented protocols (tests/support/credential_endpoints.py: no real one
exists off AWS); web identity runs against the moto server's real STS in
tests/integration/test_s3_profiles.py."""

from __future__ import annotations

import pytest

from spark_webdataset.errors import MissingCredentials, S3ConfigError, StorageError
from spark_webdataset.storage import s3_config
from spark_webdataset.storage.s3 import S3Client, client_for
from spark_webdataset.storage.s3_config import BUCKET_PROFILES, RefreshingCredentials, bucket_profiles, settings
from tests.support.credential_endpoints import IMDS_TOKEN, ROLE, CredentialEndpoint

VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
             "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_STS", "AWS_REGION", "AWS_DEFAULT_REGION", BUCKET_PROFILES,
             "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
             "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
             "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
             "AWS_EC2_METADATA_SERVICE_ENDPOINT")  # fmt: skip

CONFIG = """\
[default]
region = ap-south-1

[profile minio]
endpoint_url = http://ignored-when-s3-has-one:1
s3 =
  endpoint_url = http://minio.internal:9000/
  addressing_style = path
region = eu-west-1

[profile aws]
region = eu-central-1

[profile bad-url]
endpoint_url = minio.internal:9000
"""
CREDENTIALS = """\
[minio]
aws_access_key_id = MINIO
aws_secret_access_key = minio-secret

[aws]
aws_access_key_id = AKIAAWS
aws_secret_access_key = aws-secret
aws_session_token = aws-token

[bad-url]
aws_access_key_id = X
aws_secret_access_key = x
"""


@pytest.fixture
def files(monkeypatch, tmp_path):
    """A clean environment (no instance metadata: AWS_EC2_METADATA_DISABLED) with the two files."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    (tmp_path / "config").write_text(CONFIG)
    (tmp_path / "credentials").write_text(CREDENTIALS)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    return tmp_path


@pytest.fixture
def keys(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")


def test_the_mapping_variable_parses_and_bad_entries_are_named() -> None:
    assert bucket_profiles(" a=minio, b = aws ,,") == {"a": "minio", "b": "aws"}
    for text in ("a", "=minio", "a=", "s3://a=minio", "a/b=minio", "a=minio,a=aws"):
        with pytest.raises(S3ConfigError, match=BUCKET_PROFILES):
            bucket_profiles(text)


def test_a_mapped_bucket_takes_endpoint_region_and_keys_from_its_profile(files, keys, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://process-wide:5000")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.setenv(BUCKET_PROFILES, "bucket-a=minio,bucket-b=aws")
    minio = S3Client(settings("bucket-a"))
    assert (minio.endpoint, minio.region, minio.credentials.access_key) == (
        "http://minio.internal:9000",
        "eu-west-1",
        "MINIO",
    )
    assert minio.url("bucket-a", "k")[0] == "http://minio.internal:9000/bucket-a/k"
    aws = S3Client(settings("bucket-b"))  # no endpoint: AWS itself, in the profile's region
    assert aws.url("bucket-b", "k")[0] == "https://bucket-b.s3.eu-central-1.amazonaws.com/k"
    assert (aws.credentials.access_key, aws.credentials.token) == ("AKIAAWS", "aws-token")
    other = S3Client(settings("bucket-c"))  # unmapped: exactly the process-wide settings
    assert (other.endpoint, other.region, other.credentials.access_key) == (
        "http://process-wide:5000",
        "us-west-2",
        "ENV",
    )
    assert "minio-secret" not in repr(minio.credentials)


def test_the_default_profile_gives_endpoint_and_region_unless_the_environment_does(files, keys, monkeypatch) -> None:
    assert settings("any") == s3_config.Settings(None, None, "ap-south-1")
    (files / "config").write_text(
        CONFIG + "\n[profile work]\ns3 =\n  endpoint_url = https://r2.example/\nregion = auto\n"
    )
    monkeypatch.setenv("AWS_PROFILE", "work")
    assert settings("any") == s3_config.Settings(None, "https://r2.example", "auto")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env:1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    assert settings("any") == s3_config.Settings(None, "http://env:1", "us-east-2")


@pytest.mark.parametrize(
    "mapping, problem",
    [
        ("b=nosuch", r"neither .*config nor .*credentials has"),
        ("b=bad-url", r"endpoint_url 'minio.internal:9000' in .*config is no http\(s\) URL"),
        ("b=nokeys", r"no aws_access_key_id and aws_secret_access_key in .*credentials"),
    ],
)
def test_bad_profile_config_names_the_bucket_profile_and_file(files, keys, monkeypatch, mapping, problem) -> None:
    (files / "config").write_text(CONFIG + "\n[profile nokeys]\nregion = eu-west-1\n")
    monkeypatch.setenv(BUCKET_PROFILES, mapping)
    profile = mapping.split("=")[1]
    with pytest.raises(
        S3ConfigError, match=rf"bucket 'b' maps to profile '{profile}' \({BUCKET_PROFILES}\).*{problem}"
    ):
        settings("b")
    with pytest.raises(S3ConfigError):
        client_for("b")  # what every request of the bucket meets
    assert settings("unmapped").profile is None  # other buckets still work


def test_a_config_file_that_does_not_parse_is_named(files, keys, monkeypatch) -> None:
    (files / "config").write_text("[profile minio\nendpoint_url = x\n")
    monkeypatch.setenv(BUCKET_PROFILES, "b=minio")
    with pytest.raises(S3ConfigError, match=rf"bucket 'b' maps to profile 'minio'.*{files / 'config'}: not an AWS"):
        settings("b")
    with pytest.raises(S3ConfigError, match="not an AWS config"):
        settings("unmapped")  # its endpoint may be in there: never guess past a broken file


def test_clients_are_cached_by_what_differs_between_buckets(files, keys, monkeypatch) -> None:
    monkeypatch.setenv(BUCKET_PROFILES, "a=minio,b=minio,c=aws")
    assert client_for("a") is client_for("b")  # one profile: one client
    assert client_for("a") is not client_for("c")
    assert client_for("x") is client_for("y") is not client_for("a")
    assert client_for("a").endpoint == "http://minio.internal:9000" and client_for("x").endpoint is None
    before = client_for("x")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ROTATED")
    assert client_for("x") is not before and client_for("x").credentials.access_key == "ROTATED"


def test_the_chain_order_environment_file_container_metadata(files, monkeypatch) -> None:
    container, imds = CredentialEndpoint("container"), CredentialEndpoint("imds")
    try:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{container.url}/v2/credentials/abc")
        monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)
        monkeypatch.setenv("AWS_PROFILE", "minio")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENV")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
        assert S3Client().credentials.access_key == "ENV"
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        assert S3Client().credentials.access_key == "MINIO"  # the credentials file
        monkeypatch.setenv("AWS_PROFILE", "none-such")
        assert S3Client().credentials.access_key == "ASIA1"  # the container endpoint
        assert [(m, p) for m, p, _ in container.requests] == [("GET", "/v2/credentials/abc")]
        assert imds.requests == []
        monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        credentials = S3Client().credentials  # instance metadata, IMDSv2
        assert (credentials.access_key, credentials.token) == ("ASIA1", "token-1")
        assert [(m, p) for m, p, _ in imds.requests] == [
            ("PUT", "/latest/api/token"),
            ("GET", "/latest/meta-data/iam/security-credentials/"),
            ("GET", f"/latest/meta-data/iam/security-credentials/{ROLE}"),
        ]
        assert all(h.get("x-aws-ec2-metadata-token") == IMDS_TOKEN for m, _, h in imds.requests if m == "GET")
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        with pytest.raises(MissingCredentials, match="'none-such'.*AWS_WEB_IDENTITY_TOKEN_FILE.*container.*DISABLED"):
            S3Client()
    finally:
        container.stop()
        imds.stop()


def test_the_container_endpoint_sends_its_authorization_token(files, monkeypatch) -> None:
    endpoint = CredentialEndpoint("container", authorization="pod-identity-token")
    try:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint.url + "/creds")
        with pytest.raises(MissingCredentials, match="refused: HTTP 401"):
            S3Client()
        (files / "token").write_text("pod-identity-token\n")  # EKS Pod Identity mounts it as a file
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(files / "token"))
        assert S3Client().credentials.access_key == "ASIA1"
    finally:
        endpoint.stop()


@pytest.mark.parametrize("uri", ["http://example.com/creds", "http://10.0.0.5/creds", "ftp://127.0.0.1/x"])
def test_a_container_uri_that_could_leak_the_token_is_refused(files, monkeypatch, uri) -> None:
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri)
    with pytest.raises(S3ConfigError, match="AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        S3Client()


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("kind", ["container", "imds"])
def test_temporary_keys_are_refreshed_before_they_expire(files, monkeypatch, kind) -> None:
    clock = Clock()
    endpoint = CredentialEndpoint(kind, lifetime=120, now=clock)  # shorter than REFRESH_MARGIN: half its life
    try:
        if kind == "container":
            monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint.url + "/creds")
        else:
            monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
            monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint.url)
        s3 = S3Client(clock=clock)

        def signed_with() -> str:
            headers = s3._signed("GET", "h", "/b/k", "", {})
            return (
                headers["Authorization"].split("Credential=")[1].split("/")[0] + " " + headers["x-amz-security-token"]
            )

        assert signed_with() == "ASIA1 token-1"
        clock.now += 59
        assert signed_with() == "ASIA1 token-1" and endpoint.issued == 1  # no request while the keys are fresh
        clock.now += 2  # past half their life: the next request fetches new keys first
        assert signed_with() == "ASIA2 token-2" and endpoint.issued == 2
        clock.now += 30
        assert signed_with() == "ASIA2 token-2"
    finally:
        endpoint.stop()


def test_a_failed_refresh_keeps_valid_keys_and_never_uses_expired_ones() -> None:
    clock = Clock()
    answers = [s3_config.Credentials("K1", "s1", "t1", clock.now + 600)]

    def fetch():
        if not answers:
            raise StorageError("the endpoint did not answer")
        return answers.pop()

    credentials = RefreshingCredentials(fetch, clock)
    clock.now += 400  # due for refresh (300 s before expiry), which fails: still valid for 200 s
    assert credentials.current().access_key == "K1"
    clock.now += 195  # within 10 s of expiry: never sign with it
    with pytest.raises(StorageError, match="did not answer"):
        credentials.current()
    answers.append(s3_config.Credentials("K2", "s2", "t2", clock.now - 1))
    with pytest.raises(StorageError, match="expired already"):
        credentials.current()
