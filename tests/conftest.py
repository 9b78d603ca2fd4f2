"""Shared fixtures: real local object-store servers and the third-party schemas."""

from __future__ import annotations

from pathlib import Path

import pytest
from spotsafe.local_servers import LOCAL_AWS_ENV, gcs_server, s3_server
from stack_files import REPO_ROOT

# Third-party schemas live beside the repository, never inside it.
SHARED_SCHEMAS = REPO_ROOT.parent / "shared" / "schemas"


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    with s3_server() as url:
        yield url


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, s3_endpoint: str) -> str:
    """Point boto3 (and child processes) at the local S3-API server."""
    for key, value in LOCAL_AWS_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    return s3_endpoint


@pytest.fixture(scope="session")
def gcs_endpoint() -> str:
    with gcs_server() as url:
        yield url


@pytest.fixture(scope="session")
def shared_schemas() -> Path:
    assert SHARED_SCHEMAS.is_dir(), f"third-party schemas not found at {SHARED_SCHEMAS}"
    return SHARED_SCHEMAS
