"""Which checkpoints retention deletes. Pure, so the rule is easy to read and to test."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Committed:
    step: int
    created_at: float


def to_delete(
    committed: list[Committed],
    newest_valid: int,
    keep_last: int,
    milestone_every: int,
    max_age_s: float | None,
    now: float,
) -> list[int]:
    """Steps to delete: everything except the last keep_last, the newest valid checkpoint and
    milestones (every milestone_every-th step) younger than max_age_s."""
    steps = sorted(committed, key=lambda c: c.step, reverse=True)
    doomed = []
    for c in steps[keep_last:]:
        if c.step == newest_valid:
            continue
        milestone = milestone_every > 0 and c.step % milestone_every == 0
        if milestone and (max_age_s is None or now - c.created_at <= max_age_s):
            continue
        doomed.append(c.step)
    return doomed
