"""The planner's two tiers: each tier's interval against the losses it alone covers, and what a
failure without a notice loses with the memory tier and without it."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import pytest

from spotctl.plan.model import (
    HOUR_S,
    MemoryTier,
    SpotJob,
    interval_s,
    lost_per_loss_s,
    two_tiers,
    young_daly_s,
)

JOB = SpotJob(
    work_s=300 * HOUR_S,
    notice_rate=2.0 / HOUR_S,
    failure_rate=0.5 / HOUR_S,
    notice_s=120.0,
    step_s=10.0,
    blocked_s=60.0,
    save_s=100.0,
    restart_s=600.0,
)
# A memory save blocks for its snapshot copy alone and reaches the peer far sooner than the
# bucket (benchmarks/memory_tier.py); nine failures in ten take one node, not a pair.
MEMORY = MemoryTier(blocked_s=2.0, save_s=20.0, survives=0.9)


@pytest.mark.parametrize(
    ("interval", "blocked", "save"), [(600, 60, 100), (30, 2, 20), (50, 5, 80)]
)
def test_lost_per_loss_is_the_mean_over_losses_at_random_moments(
    interval: float, blocked: float, save: float
) -> None:
    """A loss at t into a period has lost the work done since the period's save, and the
    whole previous interval too while that save is not yet held (t < save)."""
    rng, period, lost = random.Random(7), interval + blocked, []
    for _ in range(200_000):
        t = rng.uniform(0, period)
        since = max(0.0, t - blocked) + (interval if t < save else 0.0)
        lost.append(since)
    assert statistics.fmean(lost) == pytest.approx(
        lost_per_loss_s(interval, blocked, save), rel=0.01
    )


def test_a_memory_tier_that_survives_nothing_changes_nothing() -> None:
    tiers = two_tiers(JOB, replace(MEMORY, survives=0.0))
    assert tiers.durable_interval_s == interval_s(JOB)
    assert tiers.lost_per_failure_s == tiers.durable_only_lost_per_failure_s
    assert tiers.badput == tiers.durable_only_badput
    assert tiers.memory_interval_s == JOB.work_s  # no loss to cover: never worth a save


def test_each_tier_covers_its_own_losses() -> None:
    tiers = two_tiers(JOB, MEMORY)
    survived = MEMORY.survives * JOB.failure_rate
    assert tiers.memory_interval_s == pytest.approx(young_daly_s(MEMORY.blocked_s, survived))
    # The durable tier is left the failures that take both copies: it saves less often.
    assert tiers.durable_interval_s == pytest.approx(
        young_daly_s(JOB.blocked_s, JOB.failure_rate - survived)
    )
    assert tiers.memory_interval_s < interval_s(JOB) < tiers.durable_interval_s
    memory_loss = lost_per_loss_s(tiers.memory_interval_s, MEMORY.blocked_s, MEMORY.save_s)
    durable_loss = lost_per_loss_s(tiers.durable_interval_s, JOB.blocked_s, JOB.save_s)
    assert tiers.lost_per_failure_s == pytest.approx(0.9 * memory_loss + 0.1 * durable_loss)
    assert tiers.lost_per_failure_s < 0.5 * tiers.durable_only_lost_per_failure_s
    # Fewer durable saves block less, and most failures lose a short memory interval.
    assert tiers.badput < tiers.durable_only_badput


def test_a_memory_save_as_costly_as_a_durable_one_does_not_pay() -> None:
    """Young/Daly sets each interval by its own blocked cost: a memory tier that blocks as long
    as a durable save saves about as often, and its blocking outweighs what it keeps."""
    tiers = two_tiers(JOB, replace(MEMORY, blocked_s=JOB.blocked_s, save_s=JOB.save_s))
    assert tiers.memory_interval_s == pytest.approx(interval_s(JOB), rel=0.1)
    assert tiers.badput > tiers.durable_only_badput


def test_a_memory_save_slower_than_its_interval_sets_the_interval() -> None:
    slow = replace(MEMORY, blocked_s=0.01, save_s=900.0)
    assert two_tiers(JOB, slow).memory_interval_s == pytest.approx(900.0 - 0.01)
