"""Saves skipped because one is still in flight: the cadence actually achieved is measured and
said once, with the measured save time, against the real S3-API server slowed by a proxy."""

from __future__ import annotations

import logging
import time

import pytest
import torch
from prometheus_client import REGISTRY
from spotsafe import Checkpointer, Extras


def test_skipped_saves_give_one_warning_and_the_achieved_cadence(
    s3_uri: str, proxy, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    ckpt = Checkpointer(s3_uri, every_steps=2)
    state = {"model": Extras(w=torch.zeros(10_000))}
    skipped_before = REGISTRY.get_sample_value("spotsafe_checkpoint_saves_skipped_total")
    proxy.chunk_delay_s = 0.1  # a save takes longer than two steps
    with caplog.at_level(logging.WARNING, "spotsafe"):
        for step in range(1, 61):
            time.sleep(0.03)  # the step's work
            ckpt.maybe_save(step, state)
        ckpt.close()

    warnings = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "still in flight after" in warnings[0] and "every_steps >= " in warnings[0]
    skipped = REGISTRY.get_sample_value("spotsafe_checkpoint_saves_skipped_total") - skipped_before
    assert skipped > 0
    achieved = REGISTRY.get_sample_value("spotsafe_checkpoint_interval_steps")
    assert achieved > 2, "the gauge shows the cadence achieved, not the one configured"
