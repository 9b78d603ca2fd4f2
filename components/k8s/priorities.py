"""PriorityClasses: training never preempts services, and preemptible training yields first."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

SERVICES = "services-critical"
TRAINING_STANDARD = "training-standard"
TRAINING_PREEMPTIBLE = "training-preemptible"


@dataclass(frozen=True)
class PriorityClassSpec:
    name: str
    value: int
    preemption_policy: str
    description: str


# Kubernetes preempts only pods of strictly lower priority, so no training pod can ever evict a
# service pod. Preemptible training never evicts anyone to make room for itself.
PRIORITY_CLASSES = (
    PriorityClassSpec(
        SERVICES,
        100_000,
        "PreemptLowerPriority",
        "Checkpoint-critical and coordination services; training never preempts them.",
    ),
    PriorityClassSpec(
        TRAINING_STANDARD,
        10_000,
        "PreemptLowerPriority",
        "Training runs that may displace preemptible training.",
    ),
    PriorityClassSpec(
        TRAINING_PREEMPTIBLE,
        1_000,
        "Never",
        "Training that yields first and never displaces other pods.",
    ),
)


@dataclass(frozen=True)
class PrioritiesArgs:
    classes: tuple[PriorityClassSpec, ...] = PRIORITY_CLASSES


class Priorities(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: PrioritiesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:priorities:Priorities", name, None, opts)
        for spec in args.classes:
            k8s.scheduling.v1.PriorityClass(
                f"{name}-{spec.name}",
                metadata={
                    "name": spec.name,
                    "labels": {"app.kubernetes.io/part-of": "spot-training"},
                },
                value=spec.value,
                preemption_policy=spec.preemption_policy,
                global_default=False,
                description=spec.description,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"classes": [spec.name for spec in args.classes]})
