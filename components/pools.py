"""Cloud-neutral node pool contract: the three tiers, their labels and the spot taint.

A cloud implementation (EKS managed node groups today; Karpenter NodePools or GKE node pools
later) turns each `PoolSpec` into capacity. The Kubernetes layer schedules against the same
labels and taint, so they are defined once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import pulumi

from components.config import Pools, ScheduledSize

Tier = Literal["stable", "spot", "buffer"]
Capacity = Literal["on-demand", "spot"]

# Every node carries its pool and capacity type as labels.
POOL_LABEL = "node-pool"
CAPACITY_TYPE_LABEL = "capacity-type"
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


@dataclass(frozen=True)
class PoolSpec:
    """What one pool must provide, independent of the cloud and of the provisioner."""

    tier: Tier
    capacity: Capacity
    instance_types: tuple[str, ...]
    min_size: int
    max_size: int
    desired_size: int
    disk_size_gib: int
    schedule: tuple[ScheduledSize, ...] = ()

    @property
    def labels(self) -> dict[str, str]:
        return {POOL_LABEL: self.tier, CAPACITY_TYPE_LABEL: self.capacity}

    @property
    def taints(self) -> tuple[Taint, ...]:
        return (SPOT_TAINT,) if self.capacity == "spot" else ()


def pool_specs(pools: Pools) -> list[PoolSpec]:
    """The configured tiers, in a stable order."""
    specs = []
    for tier in ("stable", "spot", "buffer"):
        pool = getattr(pools, tier)
        if pool is None:
            continue
        specs.append(
            PoolSpec(
                tier=tier,
                capacity="spot" if pool.capacity_type == "SPOT" else "on-demand",
                instance_types=tuple(pool.instance_types),
                min_size=pool.min_size,
                max_size=pool.max_size,
                desired_size=pool.desired_size,
                disk_size_gib=pool.disk_size_gib,
                schedule=tuple(getattr(pool, "schedule", ())),
            )
        )
    return specs


class NodePool(Protocol):
    """What every pool implementation exposes once built."""

    spec: PoolSpec
    name: pulumi.Output[str]
