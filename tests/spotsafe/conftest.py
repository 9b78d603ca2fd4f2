"""Runtime fixtures: fresh buckets on the real local servers, a proxy in front of S3, and a
rendezvous store for multi-node runs."""

from __future__ import annotations

import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator

import boto3
import pytest
from spotsafe_harness import (
    INTERRUPTED_RUN,
    RendezvousStore,
    TcpProxy,
    run_trainer,
    with_bin_on_path,
)

from components.k8s.placement import STABLE
from components.k8s.rendezvous import RendezvousStoreArgs, rendezvous_objects


@pytest.fixture
def proxy(s3_endpoint: str) -> Iterator[TcpProxy]:
    p = TcpProxy(s3_endpoint)
    yield p
    p.close()


@pytest.fixture(scope="session")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The example trainer's INTERRUPTED_RUN without interruption: its JSON result."""
    uri = f"file://{tmp_path_factory.mktemp('uninterrupted')}"
    rc, result, err = run_trainer(*INTERRUPTED_RUN, "--checkpoint-uri", uri)
    assert rc == 0, err
    return result


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


@pytest.fixture
def rendezvous() -> Iterator[RendezvousStore]:
    """The team's rendezvous store, run as its Deployment runs it, on a free loopback port."""
    [deployment, _] = rendezvous_objects(RendezvousStoreArgs("team-a", "image", STABLE))
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    port = command.index("--port") + 1
    command = [*command[:port], "0", *command[port + 1 :], "--host", "127.0.0.1"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=with_bin_on_path())
    endpoint = proc.stdout.readline().split()[-1]
    host, port = endpoint.rsplit(":", 1)
    socket.create_connection((host, int(port))).close()  # as the kubelet's TCP probe does
    yield RendezvousStore(endpoint, proc)
    if proc.poll() is None:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
