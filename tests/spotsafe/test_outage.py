"""A storage outage during training loses nothing: saves fail and are reported, training goes
on, and once storage is back the next save commits. Real S3-API server behind a real proxy."""

from __future__ import annotations

import time

import pytest
import torch
from prometheus_client import REGISTRY
from spotsafe import Checkpointer, Extras
from spotsafe.errors import CheckpointSaveError
from spotsafe_harness import s3_keys


def _failures() -> float:
    return (
        REGISTRY.get_sample_value(
            "spotsafe_checkpoint_save_failures_total", {"reason": "StorageUnreachableError"}
        )
        or 0.0
    )


def test_outage_loses_nothing_and_training_goes_on(
    s3_uri: str, proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    model = torch.nn.Linear(8, 8)
    state = {"model": model, "extras": Extras(step=0)}
    ckpt = Checkpointer(s3_uri, every_steps=1, max_attempts=2, connect_timeout_s=1)
    ckpt.save(1, state)
    ckpt.wait()

    proxy.down()
    failures = _failures()
    step = 1
    deadline = time.monotonic() + 60
    while _failures() == failures:  # the training loop keeps stepping through the outage
        assert time.monotonic() < deadline, "the failed save was never reported"
        step += 1
        with torch.no_grad():
            model.weight += 1
        state["extras"]["step"] = step
        ckpt.maybe_save(step, state)
        time.sleep(0.01)

    proxy.restore()
    assert "step-1/manifest.json" in s3_keys(s3_uri)
    step += 1
    state["extras"]["step"] = step
    ckpt.save(step, state)
    ckpt.wait()
    ckpt.close()

    fresh = {"model": torch.nn.Linear(8, 8), "extras": Extras()}
    assert Checkpointer(s3_uri).restore(fresh) == step
    assert torch.equal(fresh["model"].weight, model.weight)
    assert fresh["extras"]["step"] == step


def test_a_final_save_that_cannot_become_durable_is_raised(
    s3_uri: str, proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    ckpt = Checkpointer(s3_uri, max_attempts=2, connect_timeout_s=1)
    proxy.down()
    ckpt.save(5, {"extras": Extras(a=1)})
    with pytest.raises(CheckpointSaveError, match=f"step 5.*not durable.*{proxy.url}"):
        ckpt.wait()
