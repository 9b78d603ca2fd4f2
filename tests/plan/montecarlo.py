"""A Monte-Carlo simulation of the planner's job, event by event, written apart from its closed
form so that each checks the other.

One run trains a job to the end: training in stretches of `interval_s` seconds, each followed by
the blocking part of a save whose upload finishes `save_s` after the save started; interruptions
drawn from exponential clocks; a notice ends in a final save (when it fits) or in the node going
away; a failure loses the work since the last durable checkpoint; a restart on a new node can be
interrupted too. Paid time is all of it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from spotctl.plan.model import SpotJob


@dataclass
class Outcome:
    work_s: float
    paid_s: float

    @property
    def goodput(self) -> float:
        return self.work_s / self.paid_s


def run_job(job: SpotJob, interval_s: float, rng: random.Random) -> Outcome:
    rate = job.notice_rate + job.failure_rate
    t = work = durable = 0.0
    uploads: list[tuple[float, float]] = []  # (work it saves, when durable), oldest first
    next_save = interval_s

    def interrupted_after(stretch: float) -> float | None:
        """Seconds into a stretch of paid time at which an interruption lands, if any."""
        at = rng.expovariate(rate) if rate else float("inf")
        return at if at < stretch else None

    while work < job.work_s:
        # Train up to the next save or the end, then block for the save's snapshot.
        stretch = min(next_save, job.work_s) - work
        hit = interrupted_after(stretch)
        if hit is None:
            t += stretch
            work += stretch
            if work >= job.work_s:
                break
            hit = interrupted_after(job.blocked_s)
            if hit is None:
                uploads.append((work, t + job.save_s))
                t += job.blocked_s
                next_save = work + interval_s
                continue
            t += hit  # the snapshot was not taken: this save never started
        else:
            t += hit
            work += hit
        while uploads and uploads[0][1] <= t:
            durable = uploads.pop(0)[0]
        uploads.clear()
        noticed = rng.random() < job.notice_rate / rate
        if noticed and job.final_save_fits:
            t += job.save_s
            durable = work
        else:
            t += job.notice_s if noticed else 0.0
            work = durable
        while (hit := interrupted_after(job.restart_s)) is not None:
            t += hit
        t += job.restart_s
        next_save = work + interval_s
    return Outcome(work, t)


def simulate(job: SpotJob, interval_s: float, runs: int, seed: int) -> float:
    """Goodput over `runs` whole jobs: their work over their paid time."""
    rng = random.Random(seed)
    outcomes = [run_job(job, interval_s, rng) for _ in range(runs)]
    return sum(o.work_s for o in outcomes) / sum(o.paid_s for o in outcomes)
