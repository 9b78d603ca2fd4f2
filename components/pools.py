"""Cloud-neutral capacity contract: the tiers, the GPU classes, their node labels and taints.

- `stable` and `buffer` are fixed node groups (`PoolSpec`): on-demand, sized by config (the
  buffer by a schedule).
- Training capacity is per GPU class (`ClassPool`): a spot pool and an on-demand pool of one
  accelerator model and memory, provisioned on demand (Karpenter on EKS; GKE node pools with a
  ComputeClass later). Spot comes first; the class's on-demand pool is where a job lands when
  spot is dry.

A cloud turns these specs into capacity; the Kubernetes layer schedules against the same labels
and taint, so they are defined once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import pulumi

from components.catalog import catalog, class_name
from components.config import ScheduledSize, StackConfig

Tier = Literal["stable", "buffer"]
Capacity = Literal["spot", "on-demand"]
CAPACITIES: tuple[Capacity, ...] = ("spot", "on-demand")

# Every node carries its pool and capacity type as labels; GPU nodes also their class.
POOL_LABEL = "node-pool"
CAPACITY_TYPE_LABEL = "capacity-type"
GPU_CLASS_LABEL = "gpu-class"
# Spot nodes repel everything that does not tolerate this taint (checkpoint-capable jobs only).
SPOT_TAINT_KEY = "capacity-type"
SPOT_TAINT_VALUE = "spot"
SPOT_TAINT_EFFECT = "NoSchedule"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


SPOT_TAINT = Taint(SPOT_TAINT_KEY, SPOT_TAINT_VALUE, SPOT_TAINT_EFFECT)
# Every GPU node, spot or on-demand, repels what does not ask for GPUs: a platform pod on an idle
# GPU node would keep it from ever being reclaimed as empty. GKE puts this taint on GPU nodes
# itself; on EKS the GPU NodePools and a GPU buffer group carry it.
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


@dataclass(frozen=True)
class PoolSpec:
    """A fixed node group: what it must provide, independent of the cloud."""

    tier: Tier
    instance_types: tuple[str, ...]
    architecture: str
    gpus: bool  # GPU instance types: the node needs the GPU image
    min_size: int
    max_size: int
    desired_size: int
    disk_size_gib: int
    schedule: tuple[ScheduledSize, ...] = ()
    gpu_class: str | None = None  # the GPU class of its instance types

    @property
    def capacity(self) -> Capacity:
        return "on-demand"

    @property
    def labels(self) -> dict[str, str]:
        labels = {POOL_LABEL: self.tier, CAPACITY_TYPE_LABEL: self.capacity}
        if self.gpu_class is not None:
            labels[GPU_CLASS_LABEL] = self.gpu_class
        return labels


@dataclass(frozen=True)
class ClassPool:
    """The spot or the on-demand capacity of one GPU class."""

    gpu_class: str
    capacity: Capacity
    instance_types: tuple[str, ...]
    gpu: str  # accelerator model, e.g. "a10g"
    gpu_memory_gib: int
    architecture: str
    max_gpus: int
    disk_size_gib: int
    zones: tuple[str, ...]  # where its nodes may come up

    @property
    def name(self) -> str:
        return f"{self.gpu_class}-{self.capacity}"

    @property
    def labels(self) -> dict[str, str]:
        return {
            POOL_LABEL: self.name,
            CAPACITY_TYPE_LABEL: self.capacity,
            GPU_CLASS_LABEL: self.gpu_class,
        }

    @property
    def taints(self) -> tuple[Taint, ...]:
        return (SPOT_TAINT,) if self.capacity == "spot" else ()


def class_pools(config: StackConfig) -> list[ClassPool]:
    """Per GPU class, its spot pool then its on-demand pool (the fallback)."""
    types = catalog(config.cloud).instance_types
    pools = []
    for gpu_class in config.gpu_classes:
        first = types[gpu_class.instance_types[0]]
        for capacity in CAPACITIES:
            pools.append(
                ClassPool(
                    gpu_class=gpu_class.name,
                    capacity=capacity,
                    instance_types=tuple(gpu_class.instance_types),
                    gpu=first.gpu,
                    gpu_memory_gib=first.gpu_memory_gib,
                    architecture=first.architecture,
                    max_gpus={
                        "spot": gpu_class.spot_gpus,
                        "on-demand": gpu_class.on_demand_gpus,
                    }[capacity],
                    disk_size_gib=gpu_class.disk_size_gib,
                    zones=tuple(gpu_class.pool_zones(config.zones)),
                )
            )
    return pools


def spot_pool(config: StackConfig, gpu_class: str) -> ClassPool | None:
    """The spot pool of the GPU class of that name; None where the stack has no such class."""
    return next(
        (p for p in class_pools(config) if p.gpu_class == gpu_class and p.capacity == "spot"), None
    )


def pool_specs(config: StackConfig) -> list[PoolSpec]:
    """The fixed node groups (stable, then buffer if configured). A GPU buffer joins the class of
    its accelerator, so training of that class runs on it when it is free (by night)."""
    types = catalog(config.cloud).instance_types
    specs = []
    for tier in ("stable", "buffer"):
        pool = getattr(config.aws.pools, tier)
        if pool is None:
            continue
        first = types[pool.instance_types[0]]
        accelerator = first.accelerator
        specs.append(
            PoolSpec(
                tier=tier,
                instance_types=tuple(pool.instance_types),
                architecture=first.architecture,
                gpus=accelerator is not None,
                min_size=pool.min_size,
                max_size=pool.max_size,
                desired_size=pool.desired_size,
                disk_size_gib=pool.disk_size_gib,
                schedule=tuple(getattr(pool, "schedule", ())),
                gpu_class=class_name(accelerator) if accelerator else None,
            )
        )
    return specs


class NodePool(Protocol):
    """What every fixed pool implementation exposes once built."""

    spec: PoolSpec
    name: pulumi.Output[str]
