"""Where an s3:// bucket's endpoint, region and keys come from (storage/s3.py signs with them).

No SDK here (storage/s3.py says why), so this module reads what AWS SDKs read, in their order:

* A bucket named in SPARK_WEBDATASET_S3_BUCKET_PROFILES (`bucket-a=minio,bucket-b=aws`) takes
  everything from its profile, as an SDK given an explicit profile does: `endpoint_url` (the
  nested `s3 =` form first), `region` and the keys of `[profile NAME]` in the config file and
  `[NAME]` in the credentials file. The process-wide variables are for the other buckets.
* Every other bucket: endpoint AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, then the AWS_PROFILE (else
  default) profile's; region AWS_REGION, AWS_DEFAULT_REGION, then the profile's; credentials from
  the chain: environment, credentials file, config file, web identity (EKS IRSA), the container
  endpoint (ECS, EKS Pod Identity), EC2 instance metadata (IMDSv2).

Temporary credentials are refreshed before they expire (`RefreshingCredentials`). docs/s3.md.
"""

from __future__ import annotations

import configparser
import datetime
import functools
import ipaddress
import json
import os
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import MissingCredentials, S3ConfigError, StorageError

BUCKET_PROFILES = "SPARK_WEBDATASET_S3_BUCKET_PROFILES"
DEFAULT_REGION = "us-east-1"
# Temporary credentials are replaced this long before they expire (or at half their life when it is
# shorter): a request signed now must still be valid when the server checks it.
REFRESH_MARGIN = 300.0
IMDS = "http://169.254.169.254"
CONTAINER_HOST = "http://169.254.170.2"
# A container endpoint over plain http must be local: the loopback, ECS's and EKS Pod Identity's.
CONTAINER_HTTP_HOSTS = frozenset({"169.254.170.2", "169.254.170.23", "fd00:ec2::23", "localhost"})
METADATA_TIMEOUT = 1.0  # botocore's: off EC2 the instance metadata address does not answer
# Every variable the process-wide chain reads: a client is cached per their values (storage/s3.py).
CHAIN_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_DISABLED",
)  # fmt: skip


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None
    expires: float | None = None  # seconds since the epoch; None: never (keys, not a session)

    def __repr__(self) -> str:  # never a secret in a log or a traceback
        return f"Credentials(access_key={self.access_key!r}, expires={self.expires!r})"


@dataclass(frozen=True)
class Settings:
    """What a bucket's client differs by: its mapped profile (None: the process-wide chain),
    endpoint (None: AWS itself) and region."""

    profile: str | None
    endpoint: str | None
    region: str


# -- files ------------------------------------------------------------------------------------------


def config_path() -> Path:
    return Path(os.environ.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config"))


def credentials_path() -> Path:
    return Path(os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.expanduser("~/.aws/credentials"))


def _sections(path: Path) -> dict[str, dict[str, str]]:
    """The file's sections ({} if there is no file), parsed once per version of the file."""
    try:
        stat = path.stat()
    except OSError:
        return {}
    return _parsed(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _parsed(path: str, mtime_ns: int, size: int) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None, default_section="\0none")
    try:
        parser.read(path)
    except (configparser.Error, OSError, UnicodeDecodeError) as error:
        raise S3ConfigError(f"{path}: not an AWS config/credentials file ({str(error).splitlines()[0]})") from None
    return {name: dict(parser[name]) for name in parser.sections()}


def _config_section(profile: str) -> dict[str, str] | None:
    """`[profile NAME]` of the config file (`[default]` for the default profile), or None."""
    sections = _sections(config_path())
    if profile == "default" and "default" in sections:
        return sections["default"]
    return sections.get(f"profile {profile}")


def _nested(section: Mapping[str, str], name: str) -> dict[str, str]:
    """A nested block such as `s3 =\\n  endpoint_url = ...` as its own settings."""
    settings = {}
    for line in section.get(name, "").splitlines():
        key, equals, value = line.partition("=")
        if equals:
            settings[key.strip()] = value.strip()
    return settings


# -- which profile and endpoint a bucket uses -------------------------------------------------------


@functools.lru_cache(maxsize=8)
def bucket_profiles(text: str) -> dict[str, str]:
    """`bucket-a=minio, bucket-b=aws` as {bucket: profile}."""
    mapping: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        bucket, equals, profile = (part.strip() for part in entry.partition("="))
        if not (equals and bucket and profile) or "/" in bucket or bucket.startswith("s3:"):
            raise S3ConfigError(f"{BUCKET_PROFILES}: {entry!r} is not BUCKET=PROFILE (a bucket name, no s3://)")
        if mapping.get(bucket, profile) != profile:
            raise S3ConfigError(f"{BUCKET_PROFILES}: bucket {bucket!r} maps to {mapping[bucket]!r} and {profile!r}")
        mapping[bucket] = profile
    return mapping


def profile_for(bucket: str | None) -> str | None:
    """The profile the bucket is mapped to, or None: the process-wide settings."""
    text = os.environ.get(BUCKET_PROFILES, "")
    return bucket_profiles(text).get(bucket) if text and bucket else None


def _region(section: Mapping[str, str] | None, profile_first: bool) -> str:
    environment = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    configured = (section or {}).get("region")
    first, second = (configured, environment) if profile_first else (environment, configured)
    return first or second or DEFAULT_REGION


def _configured_endpoint(section: Mapping[str, str] | None, service: str = "s3") -> str | None:
    """A profile's endpoint for `service`: its nested block's, else the profile's own."""
    section = section or {}
    return _nested(section, service).get("endpoint_url") or section.get("endpoint_url") or None


def settings(bucket: str | None) -> Settings:
    """The bucket's profile, endpoint and region; S3ConfigError names the bucket, profile and file
    when its mapping cannot be used."""
    profile = profile_for(bucket)
    if profile is None:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if endpoint and region:  # the config file is not needed (nor read, as before it was)
            return Settings(None, endpoint.rstrip("/"), region)
        section = _config_section(os.environ.get("AWS_PROFILE") or "default")
        return Settings(None, (endpoint or _configured_endpoint(section) or "").rstrip("/") or None,
                        _region(section, profile_first=False))  # fmt: skip
    where = f"bucket {bucket!r} maps to profile {profile!r} ({BUCKET_PROFILES})"
    try:
        return _mapped(profile, where)
    except S3ConfigError as error:
        if where in str(error):
            raise
        raise S3ConfigError(f"{where}: {error}") from None


def _mapped(profile: str, where: str) -> Settings:
    section = _config_section(profile)
    if section is None and profile not in _sections(credentials_path()):
        raise S3ConfigError(f"{where}, which neither {config_path()} nor {credentials_path()} has")
    endpoint = _configured_endpoint(section)
    if endpoint is not None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise S3ConfigError(f"{where}: its endpoint_url {endpoint!r} in {config_path()} is no http(s) URL")
    if _static_keys(profile) is None and not _web_identity_of(section):
        raise S3ConfigError(
            f"{where}, which has no aws_access_key_id and aws_secret_access_key in {credentials_path()} or "
            f"{config_path()} (nor role_arn and web_identity_token_file)"
        )
    return Settings(profile, endpoint.rstrip("/") if endpoint else None, _region(section, profile_first=True))


def chain_environment() -> tuple[str | None, ...]:
    return tuple(os.environ.get(name) for name in CHAIN_VARIABLES)


# -- credentials ------------------------------------------------------------------------------------


class RefreshingCredentials:
    """The keys of one source; temporary ones are fetched again before they expire (never used
    after). A failed refresh keeps the old keys while they are still valid."""

    def __init__(self, fetch: Callable[[], Credentials], clock: Callable[[], float] = time.time) -> None:
        self.fetch, self.clock = fetch, clock
        self._lock = threading.Lock()
        self._current: Credentials | None = None
        self._refresh_at = 0.0
        self.current()  # a source that cannot answer fails now, at the client's creation

    def current(self) -> Credentials:
        with self._lock:
            current = self._current
            if current is not None and (current.expires is None or self.clock() < self._refresh_at):
                return current
            try:
                fresh = self.fetch()
            except StorageError:
                if current is not None and current.expires is not None and self.clock() < current.expires - 10:
                    return current
                raise
            now = self.clock()
            if fresh.expires is not None:
                if fresh.expires <= now:
                    raise StorageError(f"s3://: fresh credentials expired already ({_iso(fresh.expires)})")
                self._refresh_at = fresh.expires - min(REFRESH_MARGIN, (fresh.expires - now) / 2)
            self._current = fresh
            return fresh


def _iso(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).isoformat()


def _expiry(text: str | None, source: str) -> float:
    try:
        return datetime.datetime.fromisoformat((text or "").replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise StorageError(f"{source}: credentials without a readable Expiration ({text!r})") from None


def _static_keys(profile: str) -> Credentials | None:
    """The profile's keys: `[NAME]` of the credentials file, else `[profile NAME]` of the config file."""
    for section in (_sections(credentials_path()).get(profile), _config_section(profile)):
        if section and section.get("aws_access_key_id") and section.get("aws_secret_access_key"):
            return Credentials(section["aws_access_key_id"], section["aws_secret_access_key"],
                               section.get("aws_session_token") or None)  # fmt: skip
    return None


def _web_identity_of(section: Mapping[str, str] | None) -> tuple[str, str, str] | None:
    """(token file, role ARN, session name) from a profile, or None."""
    section = section or {}
    if section.get("web_identity_token_file") and section.get("role_arn"):
        return section["web_identity_token_file"], section["role_arn"], section.get("role_session_name", "")
    return None


def _http(method: str, url: str, timeout: float, direct: bool = False, **kwargs):
    """One request to a credential endpoint; None if nothing answers there. `direct`: never
    through an HTTP(S)_PROXY (the container endpoint and instance metadata are on this host)."""
    import requests

    try:
        with requests.Session() as session:
            session.trust_env = not direct
            return session.request(method, url, timeout=timeout, **kwargs)
    except (requests.ConnectionError, requests.Timeout):
        return None


def _sts_endpoint(profile: str | None, region: str) -> str:
    """A mapped profile's own STS endpoint (nested `sts =`, else its endpoint_url), else
    AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, the AWS_PROFILE profile's; else STS of the region."""
    if profile is not None:
        endpoint = _configured_endpoint(_config_section(profile), "sts")
    else:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_STS") or os.environ.get("AWS_ENDPOINT_URL")
        endpoint = endpoint or _configured_endpoint(_config_section(os.environ.get("AWS_PROFILE") or "default"), "sts")
    return (endpoint or f"https://sts.{region}.amazonaws.com").rstrip("/") + "/"


def web_identity(token_file: str, role_arn: str, session_name: str, endpoint: str) -> Credentials:
    """STS AssumeRoleWithWebIdentity at `endpoint` with the token file (read again at each refresh:
    Kubernetes rotates it)."""
    source = f"web identity ({role_arn}, token {token_file})"
    try:
        token = Path(token_file).read_text().strip()
    except OSError as error:
        raise MissingCredentials(f"{source}: cannot read the token file ({error.strerror})") from None
    form = {"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15", "RoleArn": role_arn,
            "RoleSessionName": session_name or f"spark-webdataset-{int(time.time())}", "WebIdentityToken": token}  # fmt: skip
    for attempt in range(3):
        reply = _http("POST", endpoint, 30, data=form)
        if reply is not None and reply.status_code < 500:
            break
        time.sleep(0.5 * (attempt + 1))
    else:
        raise StorageError(f"{source}: STS at {endpoint} did not answer")
    try:
        root = ElementTree.fromstring(reply.content)
    except ElementTree.ParseError:
        root = ElementTree.Element("none")
    found = root.find(".//{*}Credentials")
    if reply.status_code != 200 or found is None:
        code = root.findtext(".//{*}Code") or ""
        raise MissingCredentials(f"{source}: STS at {endpoint} refused: HTTP {reply.status_code} {code}".rstrip())
    keys = {child.tag.rsplit("}", 1)[-1]: child.text or "" for child in found}
    if not (keys.get("AccessKeyId") and keys.get("SecretAccessKey")):
        raise StorageError(f"{source}: STS at {endpoint} answered without keys")
    return Credentials(keys["AccessKeyId"], keys["SecretAccessKey"], keys.get("SessionToken") or None,
                       _expiry(keys.get("Expiration"), source))  # fmt: skip


def _from_json(reply, source: str) -> Credentials:
    """The JSON both the container endpoint and instance metadata answer with."""
    try:
        body = json.loads(reply.content)
        return Credentials(body["AccessKeyId"], body["SecretAccessKey"], body.get("Token") or None,
                           _expiry(body.get("Expiration"), source) if body.get("Expiration") else None)  # fmt: skip
    except (ValueError, KeyError, TypeError):
        raise StorageError(f"{source}: an answer that holds no credentials") from None


def container_url() -> str | None:
    """AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on ECS's address), else _FULL_URI, which must be
    https or a local address (the rule of AWS SDKs: a token must not leave the host)."""
    relative = os.environ.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    if relative:
        return CONTAINER_HOST + relative
    full = os.environ.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    if not full:
        return None
    parts = urlsplit(full)
    host = parts.hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme == "https" or (parts.scheme == "http" and (loopback or host in CONTAINER_HTTP_HOSTS)):
        return full
    raise S3ConfigError(
        f"AWS_CONTAINER_CREDENTIALS_FULL_URI {full!r}: over http it must be a loopback, ECS or EKS Pod Identity address"
    )


def container(url: str) -> Credentials:
    source = f"the container credentials endpoint {url}"
    headers = {}
    token_file = os.environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
    if token_file:
        try:
            headers["Authorization"] = Path(token_file).read_text().strip()
        except OSError as error:
            raise MissingCredentials(f"{source}: cannot read {token_file} ({error.strerror})") from None
    elif os.environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN"):
        headers["Authorization"] = os.environ["AWS_CONTAINER_AUTHORIZATION_TOKEN"]
    reply = _http("GET", url, 5, True, headers=headers)
    if reply is None:
        raise StorageError(f"{source} did not answer")
    if reply.status_code != 200:
        raise MissingCredentials(f"{source} refused: HTTP {reply.status_code}")
    return _from_json(reply, source)


def instance_metadata(base: str) -> Credentials | None:
    """IMDSv2: PUT a session token, GET the instance profile's role, GET its credentials. None if
    nothing answers (not on EC2)."""
    source = f"EC2 instance metadata at {base}"
    reply = _http("PUT", f"{base}/latest/api/token", METADATA_TIMEOUT, True,
                  headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"})  # fmt: skip
    if reply is None or reply.status_code != 200:
        return None
    headers = {"X-aws-ec2-metadata-token": reply.text}
    prefix = f"{base}/latest/meta-data/iam/security-credentials/"
    reply = _http("GET", prefix, METADATA_TIMEOUT, True, headers=headers)
    roles = reply.text.split() if reply is not None and reply.status_code == 200 else []
    role = roles[0] if roles else ""
    if not role:
        return None  # an instance without an instance profile
    reply = _http("GET", prefix + role, METADATA_TIMEOUT, True, headers=headers)
    if reply is None or reply.status_code != 200:
        raise StorageError(f"{source}: no credentials for role {role!r} (HTTP {getattr(reply, 'status_code', None)})")
    return _from_json(reply, source)


def _imds_base() -> str | None:
    if os.environ.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true":
        return None
    return (os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or IMDS).rstrip("/")


def credentials(chosen: Settings, clock: Callable[[], float] = time.time) -> RefreshingCredentials:
    """The keys of a mapped profile, else the first source of the chain that is set up."""
    if chosen.profile is not None:
        profile = chosen.profile
        keys = _static_keys(profile)
        if keys is not None:
            return RefreshingCredentials(lambda: keys, clock)
        identity = _web_identity_of(_config_section(profile))
        if identity is None:
            raise S3ConfigError(f"profile {profile!r}: no keys in {credentials_path()} or {config_path()}")
        sts = _sts_endpoint(profile, chosen.region)
        return RefreshingCredentials(lambda: web_identity(*identity, sts), clock)
    access, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if access and secret:
        keys = Credentials(access, secret, os.environ.get("AWS_SESSION_TOKEN") or None)
        return RefreshingCredentials(lambda: keys, clock)
    profile = os.environ.get("AWS_PROFILE") or "default"
    keys = _static_keys(profile)
    if keys is not None:
        return RefreshingCredentials(lambda: keys, clock)
    identity = _web_identity_of(_config_section(profile))
    if os.environ.get("AWS_WEB_IDENTITY_TOKEN_FILE") and os.environ.get("AWS_ROLE_ARN"):
        identity = (os.environ["AWS_WEB_IDENTITY_TOKEN_FILE"], os.environ["AWS_ROLE_ARN"],
                    os.environ.get("AWS_ROLE_SESSION_NAME", ""))  # fmt: skip
    if identity is not None:
        sts = _sts_endpoint(None, chosen.region)
        return RefreshingCredentials(lambda: web_identity(*identity, sts), clock)
    url = container_url()
    if url is not None:
        return RefreshingCredentials(lambda: container(url), clock)
    base = _imds_base()
    first = instance_metadata(base) if base else None
    if first is not None:
        pending = [first]  # the probe's answer is the first fetch

        def fetch() -> Credentials:
            found = pending.pop() if pending else instance_metadata(base)  # type: ignore[arg-type]
            if found is None:
                raise StorageError(f"EC2 instance metadata at {base} stopped answering")
            return found

        return RefreshingCredentials(fetch, clock)
    raise MissingCredentials(
        "s3:// needs AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), "
        f"or profile {profile!r} in {credentials_path()} or {config_path()} (AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, "
        "AWS_CONFIG_FILE), or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, or a container credentials endpoint, or "
        + ("EC2 instance metadata (none answered)" if base else "EC2 instance metadata (AWS_EC2_METADATA_DISABLED)")
    )
