"""The checkpoint side's Prometheus metrics move with what the Checkpointer does."""

from __future__ import annotations

import time

import torch
from prometheus_client import REGISTRY, generate_latest
from spotsafe import Checkpointer, Extras


def _value(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_saves_update_the_checkpoint_metrics(s3_uri: str) -> None:
    written = _value("spotsafe_checkpoint_bytes_total")
    saves = _value("spotsafe_checkpoint_save_duration_seconds_count")
    ckpt = Checkpointer(s3_uri)
    assert ckpt.expected_save_s is None
    ckpt.save(7, {"extras": Extras(w=torch.zeros(1000))})
    ckpt.wait()

    assert _value("spotsafe_checkpoint_last_committed_step") == 7
    assert _value("spotsafe_checkpoint_bytes_total") - written > 4000
    assert _value("spotsafe_checkpoint_save_duration_seconds_count") == saves + 1
    assert 0 <= _value("spotsafe_checkpoint_age_seconds") < 60
    assert abs(_value("spotsafe_checkpoint_last_commit_timestamp_seconds") - time.time()) < 60
    assert 0 < ckpt.expected_save_s < 60
    exposition = generate_latest(REGISTRY).decode()
    for name in ("spotsafe_checkpoint_blocked_seconds", "spotsafe_checkpoint_corrupt_skipped"):
        assert name in exposition
    ckpt.close()
