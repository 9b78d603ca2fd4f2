"""Node pools as EKS managed node groups, one component per tier.

`ManagedNodeGroupPool` is the EKS implementation of the cloud-neutral `PoolSpec` contract
(components/pools.py); a Karpenter implementation would take the same spec and expose the same
`NodePool` outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.config import GPU_FAMILY
from components.pools import PoolSpec

MIN_SPOT_INSTANCE_TYPES = 3
# EKS spells the taint effect in its own enum.
EKS_TAINT_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}


@dataclass(frozen=True)
class ManagedNodeGroupPoolArgs:
    spec: PoolSpec
    cluster_name: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    subnet_ids: pulumi.Input[list[str]]
    # The control plane's Kubernetes version: nodes follow it when it is upgraded.
    kubernetes_version: pulumi.Input[str]
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = self.spec
        if spec.capacity == "spot" and len(spec.instance_types) < MIN_SPOT_INSTANCE_TYPES:
            raise ValueError(
                f"ManagedNodeGroupPoolArgs.spec.instance_types: a spot pool needs at least "
                f"{MIN_SPOT_INSTANCE_TYPES} instance types, got {list(spec.instance_types)}"
            )
        if spec.capacity == "spot" and not spec.taints:
            raise ValueError("ManagedNodeGroupPoolArgs.spec.taints: a spot pool must be tainted")
        kinds = {bool(GPU_FAMILY.match(t)) for t in spec.instance_types}
        if len(kinds) > 1:
            raise ValueError(
                "ManagedNodeGroupPoolArgs.spec.instance_types: do not mix GPU and CPU types in "
                f"one pool (they need different AMIs): {list(spec.instance_types)}"
            )
        if not spec.min_size <= spec.desired_size <= spec.max_size:
            raise ValueError(
                "ManagedNodeGroupPoolArgs.spec: sizes must satisfy min <= desired <= max"
            )


class ManagedNodeGroupPool(pulumi.ComponentResource):
    name: pulumi.Output[str]
    autoscaling_group_name: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        args: ManagedNodeGroupPoolArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("spot:nodepools:ManagedNodeGroupPool", name, None, opts)
        self.spec = spec = args.spec
        gpu = bool(GPU_FAMILY.match(spec.instance_types[0]))
        group = aws.eks.NodeGroup(
            f"{name}-nodes",
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=args.subnet_ids,
            version=args.kubernetes_version,
            capacity_type="SPOT" if spec.capacity == "spot" else "ON_DEMAND",
            instance_types=list(spec.instance_types),
            ami_type="AL2023_x86_64_NVIDIA" if gpu else "AL2023_x86_64_STANDARD",
            disk_size=spec.disk_size_gib,
            scaling_config={
                "min_size": spec.min_size,
                "max_size": spec.max_size,
                "desired_size": spec.desired_size,
            },
            update_config={"max_unavailable_percentage": 33},
            labels=spec.labels,
            taints=[
                {"key": t.key, "value": t.value, "effect": EKS_TAINT_EFFECT[t.effect]}
                for t in spec.taints
            ],
            tags=args.tags,
            # The cluster autoscaler and the buffer schedule own the size after creation.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["scalingConfig.desiredSize"]),
        )
        self.name = group.node_group_name
        self.autoscaling_group_name = group.resources.apply(
            lambda resources: resources[0].autoscaling_groups[0].name
        )
        for action in spec.schedule:
            aws.autoscaling.Schedule(
                f"{name}-{action.name}",
                scheduled_action_name=action.name,
                autoscaling_group_name=self.autoscaling_group_name,
                recurrence=action.recurrence,
                time_zone="Etc/UTC",
                min_size=action.min_size,
                max_size=action.max_size,
                desired_capacity=action.desired_size,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs(
            {"name": self.name, "autoscaling_group_name": self.autoscaling_group_name}
        )
