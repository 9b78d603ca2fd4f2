"""The memory tier's room in a run's pods (several nodes): the copies each rank keeps in the
node's tmpfs at /dev/shm and its staging buffers, added to the pod's /dev/shm and to its memory
request and limit, which the tmpfs counts against.

A rank's snapshot is the whole state where one GPU holds it (DDP), else its shard (FSDP), as the
planner plans it (`spotctl.plan.costs.rank_share`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from components.catalog import catalog
from components.config import StackConfig
from components.config.capacity import allocatable
from components.config.stack import GpuClass, Team
from spotctl.plan.costs import MEMORY_COPIES, SHELF_COPIES, rank_share


@dataclass(frozen=True)
class Room:
    """What the tier adds to each pod of the run, GiB."""

    shelf_gib: int
    """To the /dev/shm emptyDir: each local rank's copies in the tmpfs at their peak."""
    memory_gib: int
    """To the pod's memory request and limit: the tmpfs and the staging buffers."""
    pod_memory_gib: int
    """The pod's memory request and limit with it."""
    refused: str | None = None
    """Why the run cannot hold it, naming the flag: no node of the class, or the team's memory
    quota, holds its pods."""


def room(
    settings: StackConfig,
    team: Team,
    gpu_class: GpuClass,
    gpus: int,
    nodes: int,
    state_gib: float,
) -> Room | str:
    """The tier's room in each of the run's pods, or why it does not apply (one node); its
    `refused` names the flags where no node of the class, or the team's memory quota, holds
    it."""
    types = catalog(settings.cloud).instance_types
    gpu_memory_gib = types[gpu_class.instance_types[0]].gpu_memory_gib
    if nodes < 2:
        return "one node, and the tier keeps each copy on a peer node"
    ranks = max(gpus, 1)
    rank_gib, _ = rank_share(state_gib, gpu_memory_gib, nodes * ranks)
    added = math.ceil(MEMORY_COPIES * ranks * rank_gib)
    pod_gib = gpus * gpu_class.memory_gib_per_gpu + added
    shelf = math.ceil(SHELF_COPIES * ranks * rank_gib)
    fitting = [t for t in gpu_class.instance_types if types[t].gpus >= gpus]
    largest = max(fitting, key=lambda t: allocatable(types[t], settings.cloud).memory_mib)
    room_gib = allocatable(types[largest], settings.cloud).memory_mib / 1024
    why = (
        f"--state-gib {state_gib:g}: the memory tier keeps up to {MEMORY_COPIES} copies of each "
        f"rank's {rank_gib:.3g} GiB, {added} GiB a pod of {ranks} rank(s) beside its "
        f"{gpus * gpu_class.memory_gib_per_gpu} GiB"
    )
    if pod_gib > room_gib:
        return Room(
            shelf,
            added,
            pod_gib,
            f"{why}, more than a {largest} node holds ({room_gib:.0f} GiB); checkpoint less "
            "state, or pass --memory-tier off",
        )
    quota = team.quotas[gpu_class.name]
    gpus_allowed = (
        quota.spot_gpus + quota.on_demand_gpus + settings.kubernetes.kueue.borrow_spot_gpus
    )
    memory_allowed = gpus_allowed * gpu_class.memory_gib_per_gpu
    if nodes * pod_gib > memory_allowed:
        return Room(
            shelf,
            added,
            pod_gib,
            f"{why}: {nodes * pod_gib} GiB over {nodes} nodes exceed team {team.name}'s memory "
            f"quota of {gpu_class.name}, {memory_allowed} GiB: Kueue would never admit it; "
            "checkpoint less state, or pass --memory-tier off",
        )
    return Room(shelf, added, pod_gib)
