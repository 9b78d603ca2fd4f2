"""The fixed tiers (stable, buffer) as EKS managed node groups, one component per tier.

`ManagedNodeGroupPool` is the EKS implementation of the cloud-neutral `PoolSpec` contract
(components/pools.py). GPU capacity for training is Karpenter's (components/aws/karpenter.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.pools import GPU_TAINT, PoolSpec

# EKS AMI type by CPU architecture and whether the node needs NVIDIA drivers.
AMI_TYPES = {
    ("x86_64", False): "AL2023_x86_64_STANDARD",
    ("x86_64", True): "AL2023_x86_64_NVIDIA",
    ("arm64", False): "AL2023_ARM_64_STANDARD",
    ("arm64", True): "AL2023_ARM_64_NVIDIA",
}

# EKS spells the taint effect in its own enum.
EKS_TAINT_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}
ROOT_DEVICE = "/dev/xvda"  # the AL2023 AMIs' root volume
# IMDSv2 only, and a hop limit of 1: a pod (one network hop further) can neither reach IMDS nor
# read the node role's credentials through it. Training pods learn of a recall from the drain.
IMDS_OPTIONS = {
    "http_endpoint": "enabled",
    "http_tokens": "required",
    "http_put_response_hop_limit": 1,
}


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
        if (spec.architecture, spec.gpus) not in AMI_TYPES:
            raise ValueError(
                f"ManagedNodeGroupPoolArgs.spec.architecture: no EKS AMI for {spec.architecture!r}"
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
        # Node group tags stay on the node group; a launch template's tag specifications reach
        # the instances and their volumes, so the bill splits by team, env and capacity.
        template = aws.ec2.LaunchTemplate(
            f"{name}-template",
            description=f"{spec.tier} nodes: encrypted root volume, IMDSv2 with hop limit 1",
            block_device_mappings=[
                {
                    "device_name": ROOT_DEVICE,
                    "ebs": {
                        "volume_size": spec.disk_size_gib,
                        "volume_type": "gp3",
                        "encrypted": "true",
                        "delete_on_termination": "true",
                    },
                }
            ],
            metadata_options=IMDS_OPTIONS,
            tag_specifications=[
                {"resource_type": kind, "tags": args.tags} for kind in ("instance", "volume")
            ],
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        group = aws.eks.NodeGroup(
            f"{name}-nodes",
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=args.subnet_ids,
            version=args.kubernetes_version,
            capacity_type="ON_DEMAND",
            instance_types=list(spec.instance_types),
            ami_type=AMI_TYPES[(spec.architecture, spec.gpus)],
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            scaling_config={
                "min_size": spec.min_size,
                "max_size": spec.max_size,
                "desired_size": spec.desired_size,
            },
            update_config={"max_unavailable_percentage": 33},
            labels=spec.labels,
            # A GPU buffer is tainted like every GPU node: platform pods stay on the stable tier.
            taints=[
                {"key": t.key, "value": t.value, "effect": EKS_TAINT_EFFECT[t.effect]}
                for t in ((GPU_TAINT,) if spec.gpus else ())
            ],
            tags=args.tags,
            # The buffer's schedule owns its size after creation.
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
