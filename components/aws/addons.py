"""EKS add-ons, managed by the stack at the versions pinned in components/versions.py.

They come up in two waves. The network add-ons (VPC CNI, kube-proxy, the Pod Identity agent)
come before any node: a node without a CNI never becomes Ready. The add-ons that run as ordinary
pods (CoreDNS, the CloudWatch observability agent, the EBS CSI driver that provisions
Prometheus's volume) come once the stable nodes are there, since EKS reports them healthy only
when their pods run. An add-on that calls AWS gets a role of its own, through a Pod Identity
association the add-on creates for its service account.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.aws.iam import pod_identity_trust
from components.k8s.gpus import GPU_NODES
from components.k8s.placement import STABLE
from components.versions import ADDON_NAMESPACES, KubernetesRelease

NETWORK_ADDONS = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
NODE_ADDONS = ("coredns", "amazon-cloudwatch-observability", "aws-ebs-csi-driver")
# Add-ons that call AWS: their service account and the AWS-managed policy EKS documents for them
# (`aws eks describe-addon-configuration --query podIdentityConfiguration`).
ADDON_IDENTITIES = {
    "aws-ebs-csi-driver": (
        "ebs-csi-controller-sa",
        "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy",
    ),
}
# The add-ons' own settings (`aws eks describe-addon-configuration`).
CONFIGURATION = {
    # NetworkPolicy objects are enforced only with the CNI's network policy agent on.
    "vpc-cni": {"enableNetworkPolicy": "true"},
    # On the stable tier, never on a buffer node that its schedule is about to remove.
    "coredns": {"nodeSelector": dict(STABLE.node_labels)},
    # Its DCGM exporter, the GPU metrics of GpuIdleHigh and the idle panel, schedules only on the
    # instance types its chart lists (4.1.0 has no p5.4xlarge): on every GPU class's node instead.
    "amazon-cloudwatch-observability": {"dcgmExporter": {"affinity": GPU_NODES}},
}


@dataclass(frozen=True)
class ClusterAddonsArgs:
    cluster_name: pulumi.Input[str]
    release: KubernetesRelease
    names: tuple[str, ...]
    # The cluster's ARN: the roles of the add-ons in ADDON_IDENTITIES trust its pods only.
    cluster_arn: pulumi.Input[str] | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cluster_arn is None and set(self.names) & set(ADDON_IDENTITIES):
            raise ValueError(
                f"ClusterAddonsArgs.cluster_arn: {sorted(set(self.names) & set(ADDON_IDENTITIES))}"
                " need a role that trusts this cluster's pods"
            )
        unpinned = [n for n in self.names if n not in self.release.addons]
        if unpinned:
            raise ValueError(
                f"ClusterAddonsArgs.names: {unpinned} have no version pinned for Kubernetes "
                f"{self.release.version} in components/versions.py"
            )


class ClusterAddons(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: ClusterAddonsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:addons:ClusterAddons", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        for addon in args.names:
            configuration = CONFIGURATION.get(addon)
            identities = None
            if addon in ADDON_IDENTITIES:
                service_account, policy_arn = ADDON_IDENTITIES[addon]
                role = aws.iam.Role(
                    f"{name}-{addon}",
                    assume_role_policy=pod_identity_trust(
                        args.cluster_arn, ADDON_NAMESPACES[addon], service_account
                    ),
                    tags=args.tags,
                    opts=child,
                )
                aws.iam.RolePolicyAttachment(
                    f"{name}-{addon}", role=role.name, policy_arn=policy_arn, opts=child
                )
                identities = [{"role_arn": role.arn, "service_account": service_account}]
            aws.eks.Addon(
                f"{name}-{addon}",
                cluster_name=args.cluster_name,
                addon_name=addon,
                addon_version=args.release.addons[addon],
                configuration_values=json.dumps(configuration) if configuration else None,
                pod_identity_associations=identities,
                # The stack owns these add-ons: its settings win over manual edits.
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                tags=args.tags,
                opts=child,
            )
        self.register_outputs({"addons": list(args.names)})
