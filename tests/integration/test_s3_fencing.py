"""The fencing tests of tests/integration/test_commit_fencing.py on s3:// (a real S3 API: moto in
server mode): a committer or publisher frozen past its lease (SIGSTOP at a step) destroys nothing,
writes nothing into a published version, and publishes nothing. Same test bodies; only the root
differs (this module's `root` fixture)."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.test_commit_fencing import (  # noqa: F401 - collected here with this module's root
    test_a_publisher_stalled_before_its_seal_publishes_nothing,
    test_a_stalled_committer_cannot_write_into_a_published_version,
    test_a_stalled_committer_destroys_nothing,
)


@pytest.fixture
def root(s3_server) -> str:
    """A dataset root in a fresh bucket of the S3 server."""
    return f"{s3_server.create_bucket(f'fencing-{uuid.uuid4().hex[:20]}')}/ds"
