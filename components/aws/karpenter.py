"""Karpenter: the GPU provisioner on EKS. Per GPU class, a spot NodePool and an on-demand one.

- `KarpenterIdentity` (AWS): the controller's role, bound to its service account through EKS
  Pod Identity; the role of the nodes it launches, with the access entry that lets them join.
- `Karpenter` (Kubernetes, built by the Kubernetes layer on its provider): the CRD and controller
  charts (the controller on the stable managed node group), an EC2NodeClass and a NodePool per
  class and capacity type.

Spot first, on-demand as the fallback: the spot NodePool weighs more, so Karpenter tries it
first. When EC2 answers a spot launch with insufficient capacity, Karpenter marks those
offerings unavailable (for three minutes) and launches from the class's on-demand NodePool in
its next round, seconds later, with no manual step. A later launch tries spot again.

Training nodes are never moved while a run is on them: training pods carry
`karpenter.sh/do-not-disrupt`, NodePools consolidate only empty nodes, never expire nodes and
never replace drifted ones (a budget of zero for Drifted and Underutilized). Interruptions are
not voluntary: on a spot interruption warning Karpenter drains the node, and since its
terminationGracePeriod equals the pods' grace period, it deletes a do-not-disrupt pod at once, so
the runtime gets SIGTERM with the whole notice still ahead (less the queue's lag).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.aws.iam import NodeRole, NodeRoleArgs, PodIdentity, pod_identity_role
from components.config.capacity import MAX_PODS
from components.k8s.objects import custom_resource, helm_release
from components.pools import GPU_TAINT, ClassPool
from components.versions import KARPENTER, KARPENTER_CRD

NAMESPACE = KARPENTER.namespace
SERVICE_ACCOUNT = "karpenter"
NODE_POOL_API = "karpenter.sh/v1"
NODE_CLASS_API = "karpenter.k8s.aws/v1"
# The annotation that keeps Karpenter from moving a pod's node voluntarily.
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}
# Higher weight is tried first: spot, then the class's on-demand pool.
WEIGHTS = {"spot": 100, "on-demand": 10}
# An empty GPU node waits this long for the next pod (a requeued run resumes on it) and goes.
CONSOLIDATE_AFTER = "5m"
ARCH_LABELS = {"x86_64": "amd64", "arm64": "arm64"}
# Karpenter's label for the GPU memory is in MiB as EC2 reports it, a little under the GiB sold
# (an L4 reports 22 888 MiB of its 24 GB): select by a floor at 90 % of the class's memory.
GPU_MEMORY_FLOOR = 0.9


@dataclass(frozen=True)
class KarpenterIdentityArgs:
    cluster_name: pulumi.Input[str]
    cluster_arn: pulumi.Input[str]
    region: str
    interruption_queue_arn: pulumi.Input[str]
    tags: dict[str, str] = field(default_factory=dict)


class KarpenterIdentity(pulumi.ComponentResource):
    """The controller's role (Pod Identity) and its nodes' role (access entry EC2_LINUX)."""

    node_role_name: pulumi.Output[str]
    controller_role_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: KarpenterIdentityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:karpenter:KarpenterIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        nodes = NodeRole(
            f"{name}-node", NodeRoleArgs(cluster_name=args.cluster_name, tags=args.tags), opts=child
        )
        aws.eks.AccessEntry(
            f"{name}-node",
            cluster_name=args.cluster_name,
            principal_arn=nodes.arn,
            type="EC2_LINUX",
            tags=args.tags,
            opts=child,
        )
        controller = pod_identity_role(
            f"{name}-controller",
            PodIdentity(args.cluster_name, args.cluster_arn, NAMESPACE, SERVICE_ACCOUNT),
            policy=pulumi.Output.json_dumps(
                pulumi.Output.all(
                    args.cluster_name, args.cluster_arn, args.interruption_queue_arn, nodes.arn
                ).apply(lambda values: controller_policy(*values, region=args.region))
            ),
            tags=args.tags,
            parent=self,
        )
        self.node_role_name, self.controller_role_arn = nodes.name, controller.arn
        self.register_outputs(
            {"node_role_name": self.node_role_name, "controller_role_arn": controller.arn}
        )


def controller_policy(
    cluster_name: str, cluster_arn: str, queue_arn: str, node_role_arn: str, region: str
) -> dict:
    """What the controller may do: launch and tag instances only with this cluster's tags,
    terminate only what it launched, pass only the nodes' role, read its interruption queue.

    Statement for statement the controller policies of Karpenter's reference template for
    KARPENTER's version (getting-started cloudformation.yaml), tested against it."""
    ec2 = f"arn:aws:ec2:{region}"
    account = cluster_arn.split(":")[4]
    profiles = f"arn:aws:iam::{account}:instance-profile/*"
    owned = {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
    }
    launched = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    of_a_node_pool = {"aws:ResourceTag/karpenter.sh/nodepool": "*"}
    profile_request = {**owned, "aws:RequestTag/topology.kubernetes.io/region": region}
    profile_resource = {**launched, "aws:ResourceTag/topology.kubernetes.io/region": region}
    # A spot launch creates a spot-instances-request and tags it: without it every spot launch
    # fails with UnauthorizedOperation, which Karpenter does not take for a stockout.
    created = [
        f"{ec2}:*:{kind}/*"
        for kind in (
            "fleet",
            "instance",
            "volume",
            "network-interface",
            "launch-template",
            "spot-instances-request",
        )
    ]
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "LaunchFromSharedResources",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Resource": [f"{ec2}::image/*", f"{ec2}::snapshot/*"]
                + [
                    f"{ec2}:*:{kind}/*"
                    for kind in (
                        "security-group",
                        "subnet",
                        "capacity-reservation",
                        "placement-group",
                    )
                ],
            },
            {
                "Sid": "LaunchFromItsTemplates",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Resource": f"{ec2}:*:launch-template/*",
                "Condition": {"StringEquals": launched, "StringLike": of_a_node_pool},
            },
            {
                "Sid": "CreateTaggedForThisCluster",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
                "Resource": created,
                "Condition": {
                    "StringEquals": owned,
                    "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
                },
            },
            {
                "Sid": "TagOnCreate",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": created,
                "Condition": {
                    "StringEquals": {
                        **owned,
                        "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                    },
                    "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
                },
            },
            {
                "Sid": "NameItsInstances",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": f"{ec2}:*:instance/*",
                "Condition": {
                    "StringEquals": launched,
                    "StringLike": of_a_node_pool,
                    "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                    "ForAllValues:StringEquals": {
                        "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                    },
                },
            },
            {
                "Sid": "DeleteOnlyWhatItLaunched",
                "Effect": "Allow",
                "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                "Resource": [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
                "Condition": {"StringEquals": launched, "StringLike": of_a_node_pool},
            },
            {
                "Sid": "ReadTheRegion",
                "Effect": "Allow",
                "Action": [
                    "ec2:DescribeAvailabilityZones",
                    "ec2:DescribeCapacityReservations",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstances",
                    # Instance health: Karpenter replaces a node whose status checks fail.
                    "ec2:DescribeInstanceStatus",
                    "ec2:DescribeInstanceTypeOfferings",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplates",
                    "ec2:DescribePlacementGroups",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DescribeSpotPriceHistory",
                    "ec2:DescribeSubnets",
                ],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:RequestedRegion": region}},
            },
            {
                "Sid": "ResolveAmiAliases",
                "Effect": "Allow",
                "Action": "ssm:GetParameter",
                "Resource": f"arn:aws:ssm:{region}::parameter/aws/service/*",
            },
            {
                "Sid": "ReadPrices",
                "Effect": "Allow",
                "Action": "pricing:GetProducts",
                "Resource": "*",
            },
            {
                "Sid": "ConsumeInterruptionQueue",
                "Effect": "Allow",
                "Action": [
                    "sqs:DeleteMessage",
                    "sqs:GetQueueAttributes",
                    "sqs:GetQueueUrl",
                    "sqs:ReceiveMessage",
                ],
                "Resource": queue_arn,
            },
            {
                "Sid": "PassOnlyTheNodeRole",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": node_role_arn,
                "Condition": {
                    "StringEquals": {
                        "iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]
                    }
                },
            },
            {
                "Sid": "CreateInstanceProfiles",
                "Effect": "Allow",
                "Action": "iam:CreateInstanceProfile",
                "Resource": profiles,
                "Condition": {
                    "StringEquals": profile_request,
                    "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
                },
            },
            {
                "Sid": "TagItsInstanceProfiles",
                "Effect": "Allow",
                "Action": "iam:TagInstanceProfile",
                "Resource": profiles,
                "Condition": {
                    "StringEquals": {**profile_resource, **profile_request},
                    "StringLike": {
                        "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                        "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    },
                },
            },
            {
                "Sid": "ManageItsInstanceProfiles",
                "Effect": "Allow",
                "Action": [
                    "iam:AddRoleToInstanceProfile",
                    "iam:RemoveRoleFromInstanceProfile",
                    "iam:DeleteInstanceProfile",
                ],
                "Resource": profiles,
                "Condition": {
                    "StringEquals": profile_resource,
                    "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
                },
            },
            {
                "Sid": "ReadInstanceProfiles",
                "Effect": "Allow",
                "Action": "iam:GetInstanceProfile",
                "Resource": profiles,
            },
            {
                # The EC2NodeClass finalizer lists profiles: without it deleting a class hangs.
                "Sid": "ListInstanceProfiles",
                "Effect": "Allow",
                "Action": "iam:ListInstanceProfiles",
                "Resource": "*",
            },
            {
                "Sid": "FindTheApiServer",
                "Effect": "Allow",
                "Action": "eks:DescribeCluster",
                "Resource": cluster_arn,
            },
            {
                # Karpenter avoids a zone that ARC zonal shift has moved this cluster away from.
                "Sid": "ReadZonalShift",
                "Effect": "Allow",
                "Action": "arc-zonal-shift:GetManagedResource",
                "Resource": "*",
                "Condition": {"StringEquals": {"arc-zonal-shift:ResourceIdentifier": cluster_arn}},
            },
        ],
    }


@dataclass(frozen=True)
class KarpenterArgs:
    cluster_name: pulumi.Input[str]
    # Named, since the controller cannot ask IMDS for it (hop limit 1 keeps pods out).
    region: str
    interruption_queue_name: pulumi.Input[str]
    node_role_name: pulumi.Input[str]
    subnet_ids: pulumi.Input[list[str]]
    security_group_ids: pulumi.Input[list[str]]
    pools: tuple[ClassPool, ...]  # each with its zones
    ami_alias: str
    # Seconds from a notice to the kill: the nodes' terminationGracePeriod, so that a draining
    # node deletes its do-not-disrupt training pods at once, with their whole grace period.
    notice_seconds: int
    # Cost tags on the instances and volumes, by capacity type.
    tags: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The stable managed node group's labels: the controller runs there, never on its own nodes.
    controller_node_labels: Mapping[str, str] = field(default_factory=dict)
    controller_replicas: int = 2
    # EBS snapshot of a Bottlerocket data volume holding the training image (GpuAmi).
    image_cache_snapshot: str | None = None

    def __post_init__(self) -> None:
        if not self.pools:
            raise ValueError("KarpenterArgs.pools: at least one GPU class pool")
        if self.ami_alias.endswith("@latest"):
            raise ValueError(
                f"KarpenterArgs.ami_alias: pin a version, not {self.ami_alias!r}: an unpinned "
                "AMI rolls every GPU node whenever AWS publishes one"
            )
        if self.controller_replicas < 1:
            raise ValueError("KarpenterArgs.controller_replicas: at least 1")
        if self.image_cache_snapshot and not self.ami_alias.startswith("bottlerocket@"):
            raise ValueError(
                "KarpenterArgs.image_cache_snapshot: needs a bottlerocket AMI alias, not "
                f"{self.ami_alias!r}"
            )


def controller_values(args: KarpenterArgs) -> dict:
    """Chart values; every key exists in the chart's values.yaml of KARPENTER's version."""
    return {
        "settings": {
            "clusterName": args.cluster_name,
            "interruptionQueue": args.interruption_queue_name,
            # A class lists few types; when they cannot all be offered, launch what can be.
            "minValuesPolicy": "BestEffort",
        },
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
        "replicas": args.controller_replicas,
        "nodeSelector": {"kubernetes.io/os": "linux", **args.controller_node_labels},
        "controller": {
            "env": [{"name": "AWS_REGION", "value": args.region}],
            "resources": {
                "requests": {"cpu": "500m", "memory": "1Gi"},
                "limits": {"memory": "1Gi"},
            },
        },
        # Prometheus selects every ServiceMonitor (components/k8s/monitoring.py).
        "serviceMonitor": {"enabled": True},
    }


def block_devices(args: KarpenterArgs, pool: ClassPool) -> list[dict]:
    """AL2023: one root volume of the pool's size. Bottlerocket (Karpenter's defaults for it): a
    small OS volume, and the data volume that holds containerd's images and the pods' ephemeral
    storage, made from the image cache's snapshot when there is one."""
    volume = {"volumeType": "gp3", "deleteOnTermination": True}
    sized = {**volume, "volumeSize": f"{pool.disk_size_gib}Gi"}
    if not args.ami_alias.startswith("bottlerocket@"):
        return [{"deviceName": "/dev/xvda", "ebs": {**sized, "encrypted": True}}]
    # A volume made from a snapshot takes the snapshot's encryption: EC2 refuses a value here.
    data = (
        {**sized, "snapshotID": args.image_cache_snapshot}
        if args.image_cache_snapshot
        else {**sized, "encrypted": True}
    )
    return [
        {"deviceName": "/dev/xvda", "ebs": {**volume, "volumeSize": "4Gi", "encrypted": True}},
        {"deviceName": "/dev/xvdb", "ebs": data},
    ]


def ec2_node_class(args: KarpenterArgs, pool: ClassPool) -> dict:
    return {
        "apiVersion": NODE_CLASS_API,
        "kind": "EC2NodeClass",
        "metadata": {"name": pool.name},
        "spec": {
            "role": args.node_role_name,
            "amiSelectorTerms": [{"alias": args.ami_alias}],
            "subnetSelectorTerms": pulumi.Output.from_input(args.subnet_ids).apply(
                lambda ids: [{"id": i} for i in ids]
            ),
            "securityGroupSelectorTerms": pulumi.Output.from_input(args.security_group_ids).apply(
                lambda ids: [{"id": i} for i in ids]
            ),
            # As on every node: IMDSv2 only, out of reach of pods (hop limit 1).
            "metadataOptions": {
                "httpEndpoint": "enabled",
                "httpProtocolIPv6": "disabled",
                "httpPutResponseHopLimit": 1,
                "httpTokens": "required",
            },
            "blockDeviceMappings": block_devices(args, pool),
            # Local NVMe, where the type has it, becomes the node's ephemeral storage: the
            # runtime's local staging tier (/scratch) lives there.
            "instanceStorePolicy": "RAID0",
            "kubelet": {"maxPods": MAX_PODS},
            # Reach the instances, their volumes and network interfaces: cost tags on the bill.
            "tags": dict(args.tags.get(pool.capacity, {})),
        },
    }


def node_pool(args: KarpenterArgs, pool: ClassPool) -> dict:
    spot = pool.capacity == "spot"
    types = {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": list(pool.instance_types),
    }
    zones = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": list(pool.zones)}
    if spot:
        # Spot stays available by spreading over sizes and zones.
        types["minValues"] = min(3, len(pool.instance_types))
        zones["minValues"] = min(2, len(pool.zones))
    return {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": pool.name},
        "spec": {
            "weight": WEIGHTS[pool.capacity],
            "template": {
                "metadata": {"labels": pool.labels},
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": pool.name,
                    },
                    "requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": [pool.capacity],
                        },
                        types,
                        {
                            "key": "karpenter.k8s.aws/instance-gpu-name",
                            "operator": "In",
                            "values": [pool.gpu],
                        },
                        {
                            "key": "karpenter.k8s.aws/instance-gpu-memory",
                            "operator": "Gt",
                            "values": [str(int(pool.gpu_memory_gib * 1024 * GPU_MEMORY_FLOOR))],
                        },
                        zones,
                        {
                            "key": "kubernetes.io/arch",
                            "operator": "In",
                            "values": [ARCH_LABELS[pool.architecture]],
                        },
                    ],
                    "taints": [
                        {"key": t.key, "value": t.value, "effect": t.effect}
                        for t in (*pool.taints, GPU_TAINT)
                    ],
                    # Nodes live as long as their work: no forced replacement under a run.
                    "expireAfter": "Never",
                    "terminationGracePeriod": f"{args.notice_seconds}s",
                },
            },
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": CONSOLIDATE_AFTER,
                "budgets": [
                    {"nodes": "100%", "reasons": ["Empty"]},
                    {"nodes": "0", "reasons": ["Drifted", "Underutilized"]},
                ],
            },
            "limits": {"nvidia.com/gpu": str(pool.max_gpus)},
        },
    }


class Karpenter(pulumi.ComponentResource):
    """The controller and, per class and capacity type, an EC2NodeClass and a NodePool."""

    def __init__(
        self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:karpenter:Karpenter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        crds = helm_release(f"{name}-crd", KARPENTER_CRD, {}, child)
        controller = helm_release(
            f"{name}-controller",
            KARPENTER,
            controller_values(args),
            pulumi.ResourceOptions(parent=self, depends_on=[crds]),
            skip_crds=True,
        )
        after_controller = pulumi.ResourceOptions(parent=self, depends_on=[crds, controller])
        for pool in args.pools:
            custom_resource(
                f"{name}-{pool.name}-nodeclass", ec2_node_class(args, pool), after_controller
            )
            custom_resource(f"{name}-{pool.name}-nodepool", node_pool(args, pool), after_controller)
        self.register_outputs({"nodePools": [pool.name for pool in args.pools]})
