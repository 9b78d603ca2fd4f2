"""The checkpoint interval a team's run is written with: the planner's (`spotctl plan`), for the
stack's cloud, notice window and image delivery, the run's nodes and its state.

The planner has no interruption rate of its own per GPU class yet, so the class is planned at
the Spot Instance Advisor band ASSUMED_BAND; the one call to the planner is `planned`, so a rate
per class replaces the assumption there alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from components.config import StackConfig
from spotctl.plan import Inputs, scenario
from spotctl.plan.model import SpotJob, interval_s

# The band the planner assumes for every GPU class: its upper edge, 10 % of nodes a month.
ASSUMED_BAND = "5-10%"
GB_PER_GIB = 2**30 / 10**9


@dataclass(frozen=True)
class Planned:
    interval_s: float
    """Seconds of training between saves."""
    job: SpotJob
    """The job as the planner saw it (its save, its notice)."""
    band: str
    """The interruption band it was planned for."""

    def every_steps(self) -> int:
        """The interval in whole steps, at least one, as `spotctl plan` gives it."""
        return max(1, round(self.interval_s / self.job.step_s))


def planned(
    settings: StackConfig,
    stack: str,
    program: Path,
    nodes: int,
    state_gib: float,
    step_s: float,
    job_hours: float,
) -> Planned:
    """The planner's interval for a run of the stack on `nodes` nodes, each saving its shard of
    `state_gib` GiB, a step taking `step_s` s, `job_hours` of training in all."""
    window = settings.notice_window()
    plan = scenario(
        Inputs(
            cloud=settings.cloud,
            step_s=step_s,
            job_hours=job_hours,
            state_gb=state_gib * GB_PER_GIB,
            interruption_band=ASSUMED_BAND,
            nodes=nodes,
            notice_s=window.grace_s,
            notice_lag_s=window.lag_s,
            stack=stack,
            program=program,
        )
    )
    return Planned(interval_s(plan.job), plan.job, ASSUMED_BAND)
