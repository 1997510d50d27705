"""Where s3:// finds its keys, region and endpoint (storage/s3.py): the environment first, then the
shared credentials file's profile; a missing key is MissingCredentials naming where it looked."""

from __future__ import annotations

import pytest

from spark_webdataset.errors import MissingCredentials, StorageError
from spark_webdataset.storage.s3 import S3Client, split

VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
             "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE")  # fmt: skip


@pytest.fixture
def clean(monkeypatch, tmp_path):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    return tmp_path / "credentials"


def test_the_environment_comes_first(clean, monkeypatch) -> None:
    clean.write_text("[default]\naws_access_key_id = FILE\naws_secret_access_key = file-secret\n")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    credentials = S3Client().credentials
    assert (credentials.access_key, credentials.token) == ("ENV", "token")


def test_the_profile_of_the_shared_file(clean, monkeypatch) -> None:
    clean.write_text(
        "[default]\naws_access_key_id = D\naws_secret_access_key = d\n"
        "[work]\naws_access_key_id = W\naws_secret_access_key = w\naws_session_token = t\n"
    )
    assert S3Client().credentials.access_key == "D"
    monkeypatch.setenv("AWS_PROFILE", "work")
    assert (S3Client().credentials.access_key, S3Client().credentials.token) == ("W", "t")


def test_no_keys_is_missing_credentials_naming_the_profile_and_file(clean, monkeypatch) -> None:
    clean.write_text("[default]\naws_access_key_id = D\n")  # no secret
    monkeypatch.setenv("AWS_PROFILE", "default")
    with pytest.raises(MissingCredentials, match=r"AWS_ACCESS_KEY_ID.*'default'.*credentials"):
        S3Client()
    clean.write_text("not an ini file [")
    with pytest.raises(MissingCredentials):
        S3Client()


def test_endpoints_and_addressing(clean, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "K")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "S")
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    url, host, path, _ = S3Client().url("bucket", "a b/c.tar")
    assert (url, host, path) == (
        "https://bucket.s3.eu-west-3.amazonaws.com/a%20b/c.tar",
        "bucket.s3.eu-west-3.amazonaws.com",
        "/a%20b/c.tar",
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio:9000/")
    assert S3Client().url("bucket", "k")[0] == "http://minio:9000/bucket/k"  # path-style on a custom endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://r2.example:443")
    assert S3Client().url("bucket", "k")[0] == "https://r2.example:443/bucket/k"


@pytest.mark.parametrize("uri, message", [("gs://b/x", "not an s3:// URI"), ("s3:///x", "no bucket")])
def test_malformed_s3_uris_are_named(uri: str, message: str) -> None:
    with pytest.raises(StorageError, match=message):
        split(uri)
