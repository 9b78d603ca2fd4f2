"""Retention keeps the last K plus milestones, deletes by age, never the newest valid."""

from __future__ import annotations

import pytest
import torch
from spotsafe import Checkpointer, Extras
from spotsafe.errors import ConfigError
from spotsafe.retention import Committed, to_delete
from spotsafe_harness import s3_keys


def _committed(*steps: int, created_at: float = 0.0) -> list[Committed]:
    return [Committed(s, created_at) for s in steps]


def test_keeps_last_k_and_milestones() -> None:
    doomed = to_delete(_committed(*range(10, 101, 10)), 100, 2, 40, None, now=0)
    assert sorted(doomed) == [10, 20, 30, 50, 60, 70]


def test_milestones_older_than_max_age_go() -> None:
    old = _committed(40, 80, created_at=0.0)
    recent = _committed(90, 100, 120, created_at=1000.0)
    doomed = to_delete(old + recent, 120, 2, 40, max_age_s=500, now=1000.0)
    assert sorted(doomed) == [40, 80, 90]


def test_never_deletes_the_newest_valid_even_when_newer_ones_exist() -> None:
    # 110 and 120 are committed but corrupt: 100 is the newest valid one.
    doomed = to_delete(_committed(80, 90, 100, 110, 120), 100, 2, 0, None, now=0)
    assert sorted(doomed) == [80, 90]


def test_keep_last_below_two_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="keep_last=1"):
        Checkpointer(f"file://{tmp_path}", keep_last=1)


def test_retention_on_the_bucket(s3_uri: str) -> None:
    ckpt = Checkpointer(s3_uri, keep_last=2, milestone_every=30, async_save=False)
    for step in range(10, 101, 10):
        ckpt.save(step, {"extras": Extras(w=torch.zeros(3))})
    ckpt.close()
    steps = {int(k.split("/")[0][5:]) for k in s3_keys(s3_uri) if k.startswith("step-")}
    assert steps == {30, 60, 90, 100}
    assert all(f"step-{s}/manifest.json" in s3_keys(s3_uri) for s in steps)
