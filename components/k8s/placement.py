"""Where a pod runs: the node labels that select its capacity and the taints that guard it."""

from __future__ import annotations

from dataclasses import dataclass

from components.pools import (
    CAPACITY_TYPE_LABEL,
    GPU_CLASS_LABEL,
    GPU_TAINT,
    POOL_LABEL,
    SPOT_TAINT,
    Capacity,
    Taint,
)


@dataclass(frozen=True)
class Placement:
    """Capacity as the scheduler sees it: the labels its nodes carry, the taints they bear."""

    node_labels: dict[str, str]
    taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        if not self.node_labels:
            raise ValueError("a placement needs at least one node label to select its nodes")

    def tolerations(self) -> list[dict]:
        return [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            for t in self.taints
        ]

    def node_selector_term(self) -> dict:
        return {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value]}
                for key, value in sorted(self.node_labels.items())
            ]
        }


def class_placement(
    gpu_class: str, capacity: Capacity, compute_class_label: str | None = None
) -> Placement:
    """A GPU class's capacity, as Kueue's flavors and the Job templates select it.

    Spot-first placement names the class only, not the capacity type: its pods tolerate the spot
    taint and prefer spot nodes, and the provisioner puts them on the class's on-demand nodes
    when spot cannot be had. The on-demand placement is pinned to on-demand nodes. Either
    tolerates the taint of every GPU node.

    Where the provisioner's spot-then-on-demand order is a node class of the cluster's own (GKE's
    ComputeClass, named after the GPU class), the pods select it by `compute_class_label` and
    tolerate the taint of that key its nodes carry.
    """
    labels = {GPU_CLASS_LABEL: gpu_class}
    taints = (SPOT_TAINT, GPU_TAINT) if capacity == "spot" else (GPU_TAINT,)
    if capacity == "on-demand":
        labels[CAPACITY_TYPE_LABEL] = "on-demand"
    if compute_class_label is not None:
        labels[compute_class_label] = gpu_class
        taints = (*taints, Taint(compute_class_label, gpu_class, "NoSchedule"))
    return Placement(labels, taints)


# What a training pod prefers among the nodes its placement allows.
SPOT_PREFERENCE = Placement({CAPACITY_TYPE_LABEL: "spot"})
# The on-demand tier that is never scaled down on a schedule: coordination services.
STABLE = Placement({POOL_LABEL: "stable"})
