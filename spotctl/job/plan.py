"""A run's plan: the node its pods are packed on (the class's smallest instance type that holds
a pod's GPUs and memory, the memory tier's included), and the planner's intervals for that node's
interruption band, prices and network."""

from __future__ import annotations

from pathlib import Path

from components.catalog import catalog
from components.config import StackConfig
from components.config.capacity import allocatable
from components.config.stack import GpuClass
from spotctl.job.memory import Room, room
from spotctl.job.request import JobError, Placed
from spotctl.plan import Planned, planned_interval
from spotctl.plan.costs import GB_PER_GIB


def node_type(settings: StackConfig, gpu_class: GpuClass, gpus: int, memory_gib: int = 0) -> str:
    """The class's smallest instance type (by GPUs) that holds a pod of `gpus` GPUs and
    `memory_gib`; where none holds the memory, the one with the most of it."""
    types = catalog(settings.cloud).instance_types

    def memory_mib(name: str) -> int:
        return allocatable(types[name], settings.cloud).memory_mib

    enough_gpus = [name for name in gpu_class.instance_types if types[name].gpus >= gpus]
    fitting = [name for name in enough_gpus if memory_mib(name) >= memory_gib * 1024]
    if not fitting:
        return max(enough_gpus, key=memory_mib)
    return min(fitting, key=lambda name: types[name].gpus)


def plan_run(
    settings: StackConfig,
    stack: str,
    program: Path,
    placed: Placed,
    nodes: int,
    state_gib: float,
    step_s: float,
    job_hours: float,
    memory_tier: str = "auto",
) -> tuple[Planned, Room | str]:
    """The plan for the run, and the memory tier's room in its pods or why it has none. It is
    written where it applies and, with `memory_tier` "auto", the plan finds the two tiers'
    badput below the durable tier's alone and a node and the team's quota hold it; "on":
    wherever it applies, JobError where no node, or the team's quota, holds it; "off": never."""
    gpus, gpu_class = placed.gpus_per_node, placed.gpu_class

    def plan(instance_type: str | None) -> Planned:
        return planned_interval(
            stack,
            gpu_class.name,
            state_gib * GB_PER_GIB,
            nodes=nodes,
            step_s=step_s,
            job_hours=job_hours,
            instance_type=instance_type,
            program=program,
        )

    alone = plan(node_type(settings, gpu_class, gpus, gpus * gpu_class.memory_gib_per_gpu))
    if memory_tier == "off":
        return alone, "--memory-tier off"
    tier = room(settings, placed.team, gpu_class, gpus, nodes, state_gib)
    if isinstance(tier, str):
        return alone, tier
    both = plan(node_type(settings, gpu_class, gpus, tier.pod_memory_gib))
    tiers = both.memory_tier
    if memory_tier == "auto" and not tiers["pays"]:
        return alone, (
            f"it does not pay here: badput {tiers['badput']:.3%} with both tiers against "
            f"{tiers['durable_only_badput']:.3%} with the durable tier alone (spotctl plan shows "
            "the two tiers; --memory-tier on writes it)"
        )
    if tier.refused and memory_tier == "auto":  # the plan's choice gives way; asked for, refused
        return alone, (
            "it would pay, but no node of the class, or the team's memory quota, holds its "
            "copies (--memory-tier on says which)"
        )
    if tier.refused:
        raise JobError(tier.refused)
    return both, tier
