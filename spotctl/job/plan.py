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
from spotctl.job.request import Placed
from spotctl.plan import Planned, planned_interval
from spotctl.plan.costs import GB_PER_GIB


def node_type(settings: StackConfig, gpu_class: GpuClass, gpus: int, memory_gib: int = 0) -> str:
    """The class's smallest instance type (by GPUs) that holds a pod of `gpus` GPUs and
    `memory_gib`; the caller has checked that one does."""
    types = catalog(settings.cloud).instance_types
    fitting = [
        name
        for name in gpu_class.instance_types
        if types[name].gpus >= gpus
        and allocatable(types[name], settings.cloud).memory_mib >= memory_gib * 1024
    ]
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
    memory_tier: bool = True,
) -> tuple[Planned, Room | str]:
    """The plan for the run, and the memory tier's room in its pods or why it has none."""
    gpus, gpu_class = placed.gpus_per_node, placed.gpu_class
    tier = (
        room(settings, placed.team, gpu_class, gpus, nodes, state_gib)
        if memory_tier
        else "--no-memory-tier"
    )
    pod_gib = gpus * gpu_class.memory_gib_per_gpu if isinstance(tier, str) else tier.pod_memory_gib
    planned = planned_interval(
        stack,
        gpu_class.name,
        state_gib * GB_PER_GIB,
        nodes=nodes,
        step_s=step_s,
        job_hours=job_hours,
        instance_type=node_type(settings, gpu_class, gpus, pod_gib),
        program=program,
    )
    return planned, tier
