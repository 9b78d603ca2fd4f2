"""The checkpoint interval a team's run is written with: the one `spotctl plan --stack S
--class C` plans for the stack's GPU class (its instance type with the most GPUs, that type's
interruption band and prices in the stack's region from the provider data table, the stack's
notice and image delivery), for the run's nodes and state. `planned` is the one call to the
planner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spotctl.plan import Inputs, scenario
from spotctl.plan.model import SpotJob, interval_s

GB_PER_GIB = 2**30 / 10**9


@dataclass(frozen=True)
class Planned:
    interval_s: float
    """Seconds of training between saves."""
    job: SpotJob
    """The job as the planner saw it (its save, its notice)."""
    band: str
    """The interruption band it was planned for (the provider data table's, for the class)."""

    def every_steps(self) -> int:
        """The interval in whole steps, at least one, as `spotctl plan` gives it."""
        return max(1, round(self.interval_s / self.job.step_s))


def planned(
    stack: str,
    program: Path,
    gpu_class: str,
    nodes: int,
    state_gib: float,
    step_s: float,
    job_hours: float,
) -> Planned:
    """The planner's interval for a run of the stack's `gpu_class` on `nodes` nodes, each saving
    its shard of `state_gib` GiB, a step taking `step_s` s, `job_hours` of training in all."""
    plan = scenario(
        Inputs(
            cloud=None,
            step_s=step_s,
            job_hours=job_hours,
            state_gb=state_gib * GB_PER_GIB,
            nodes=nodes,
            stack=stack,
            program=program,
            gpu_class=gpu_class,
        )
    )
    return Planned(interval_s(plan.job), plan.job, plan.assumptions["provider_data"]["band"])
