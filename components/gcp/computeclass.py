"""GKE's spot-then-on-demand order per GPU class: a custom ComputeClass (cloud.google.com/v1).

Each GPU class has one ComputeClass of the same name. Its priorities are the class's spot node
pools, then its on-demand node pools: the cluster autoscaler scales up the first pool that can
take a pending pod, and when Compute Engine has no Spot capacity of the class in any of its
zones, it moves to the on-demand pools within seconds, with no manual step. Nothing outside
these pools is created (`whenUnsatisfiable: DoNotScaleUp`, no node pool auto-creation).

With `activeMigration.optimizeRulePriority`, GKE also returns running pods to spot once it can:
it starts a spot node and drains the on-demand one. That drain is an eviction: the pod gets
SIGTERM and its grace period, the runtime treats it as a termination notice (final save within
the budget), and the Job replaces the pod without counting a failure (`DisruptionTarget` is
ignored). Pods admitted to the on-demand flavor stay, since they select on-demand nodes only.

A GPU buffer pool of the class (components/gcp/buffer.py) comes first: its nodes are paid for by
the schedule whatever runs on them, the autoscaler never sizes it (it has no autoscaling), and
a pod on it is at the class's top priority, so active migration never moves it off to spot.

A node pool serves a ComputeClass once it carries the class's label and taint
(`cloud.google.com/compute-class=<class>`); GKE adds the toleration to pods that select the class,
and the platform's placements carry it too.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.k8s.objects import custom_resource

API_VERSION = "cloud.google.com/v1"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"


@dataclass(frozen=True)
class ClassOrder:
    """A GPU class's GKE node pools, by capacity, in the order they are tried."""

    gpu_class: str
    spot_pools: tuple[str, ...]
    on_demand_pools: tuple[str, ...]
    buffer_pools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.spot_pools and not self.on_demand_pools:
            raise ValueError(f"ClassOrder {self.gpu_class!r}: no node pool at all")


@dataclass(frozen=True)
class ComputeClassesArgs:
    classes: tuple[ClassOrder, ...]
    # Move running pods back to spot when it returns (an eviction, handled as a notice).
    active_migration: bool = True

    def __post_init__(self) -> None:
        if not self.classes:
            raise ValueError("ComputeClassesArgs.classes: at least one GPU class")


def compute_class(order: ClassOrder, active_migration: bool) -> dict:
    priorities = [
        {"nodepools": list(pools)}
        for pools in (order.buffer_pools, order.spot_pools, order.on_demand_pools)
        if pools
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ComputeClass",
        "metadata": {"name": order.gpu_class},
        "spec": {
            "priorities": priorities,
            "activeMigration": {"optimizeRulePriority": active_migration},
            "nodePoolAutoCreation": {"enabled": False},
            "whenUnsatisfiable": "DoNotScaleUp",
        },
    }


class ComputeClasses(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: ComputeClassesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:ComputeClasses", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        names = [
            custom_resource(
                f"{name}-{order.gpu_class}",
                compute_class(order, args.active_migration),
                child,
            ).metadata["name"]
            for order in args.classes
        ]
        self.register_outputs({"names": names})
