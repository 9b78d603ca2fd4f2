"""The checkpoint interval a team's run is written with: the one `spotctl plan --stack S
--class C --instance-type T` plans for the node the run's pods land on (T: `node_type`), that
type's interruption band and prices in the stack's region from the provider data table, the
stack's notice and image delivery, the run's nodes and state. `planned` is the one call to the
planner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from components.catalog import catalog
from components.config import StackConfig
from components.config.stack import GpuClass
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


def node_type(settings: StackConfig, gpu_class: GpuClass, gpus_per_node: int) -> str:
    """The class's smallest instance type that holds a pod of `gpus_per_node` GPUs: the node
    such a pod is packed on, whose interruptions and prices the run meets."""
    types = catalog(settings.cloud).instance_types
    fitting = [t for t in gpu_class.instance_types if types[t].gpus >= gpus_per_node]
    return min(fitting, key=lambda t: types[t].gpus)


def planned(
    stack: str,
    program: Path,
    gpu_class: str,
    instance_type: str,
    nodes: int,
    state_gib: float,
    step_s: float,
    job_hours: float,
) -> Planned:
    """The planner's interval for a run of the stack's `gpu_class` on `nodes` nodes of
    `instance_type`, each saving
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
            instance_type=instance_type,
        )
    )
    return Planned(interval_s(plan.job), plan.job, plan.assumptions["provider_data"]["band"])
