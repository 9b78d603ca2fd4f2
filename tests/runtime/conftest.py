"""Runtime fixtures: fresh buckets on the real local servers and a proxy in front of S3."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator

import boto3
import pytest
from spotsafe_harness import TcpProxy


@pytest.fixture
def proxy(s3_endpoint: str) -> Iterator[TcpProxy]:
    p = TcpProxy(s3_endpoint)
    yield p
    p.close()


@pytest.fixture
def s3_uri(aws_env: str) -> str:
    """s3://<fresh bucket>/run on the local S3-API server."""
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/run"


@pytest.fixture
def gcs_uri(gcs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_endpoint)
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    storage.Client().create_bucket(bucket)
    return f"gs://{bucket}/run"


@pytest.fixture(autouse=True)
def _sigterm_handler_restored() -> Iterator[None]:
    """A finished Run leaves a SIGTERM handler behind on purpose; not in the test process."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)
