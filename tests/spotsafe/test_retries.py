"""Storage retries leave the training's random stream alone: saves whose requests were dropped
and retried (botocore / google-api-core backoff with jitter), in a run that is also interrupted
and resumed, still end bitwise-identical to an uninterrupted run. Real servers, a real proxy."""

from __future__ import annotations

import uuid

import pytest
from spotsafe import Checkpointer
from spotsafe.examples.train import TrainConfig, run
from spotsafe_harness import TcpProxy

STEPS, STOP, EVERY = 40, 23, 5


def _train(uri: str, steps: int) -> dict:
    return run(TrainConfig(steps, uri, seed=4), checkpointer=Checkpointer(uri, every_steps=EVERY))


def _interrupted_with_retries(uri: str, proxy: TcpProxy, pattern: str) -> dict:
    for steps in (STOP, STEPS):  # stop at STOP (saved), then resume from it to STEPS
        proxy.cut(pattern, times=4)
        result = _train(uri, steps)
        assert len(proxy.cut_requests) >= 4, "no request was retried"
        proxy.cut_requests.clear()
    assert result["resumed_from"] == STOP
    return result


def test_s3_retries_leave_exact_resume_intact(
    s3_uri: str, proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    reference = _train(f"file://{tmp_path}/reference", STEPS)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    resumed = _interrupted_with_retries(s3_uri, proxy, r"^(PUT|POST) .*/step-")
    assert resumed["weights_sha256"] == reference["weights_sha256"]


def test_gcs_retries_leave_exact_resume_intact(
    gcs_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from google.cloud import storage

    reference = _train(f"file://{tmp_path}/reference", STEPS)
    proxy = TcpProxy(gcs_endpoint)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    storage.Client().create_bucket(bucket)
    resumed = _interrupted_with_retries(f"gs://{bucket}/run", proxy, r"^POST /upload/")
    assert resumed["weights_sha256"] == reference["weights_sha256"]
    proxy.close()
