"""EKS add-ons, managed by the stack at the versions pinned in components/versions.py.

They come up in two waves. The network add-ons (VPC CNI, kube-proxy, the Pod Identity agent)
come before any node: a node without a CNI never becomes Ready. The add-ons that run as ordinary
pods (CoreDNS, the CloudWatch observability agent) come once the stable nodes are there, since
EKS reports them healthy only when their pods run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.k8s.placement import STABLE
from components.versions import KubernetesRelease

NETWORK_ADDONS = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
NODE_ADDONS = ("coredns", "amazon-cloudwatch-observability")
# The add-ons' own settings (`aws eks describe-addon-configuration`).
CONFIGURATION = {
    # NetworkPolicy objects are enforced only with the CNI's network policy agent on.
    "vpc-cni": {"enableNetworkPolicy": "true"},
    # On the stable tier, never on a buffer node that its schedule is about to remove.
    "coredns": {"nodeSelector": dict(STABLE.node_labels)},
}


@dataclass(frozen=True)
class ClusterAddonsArgs:
    cluster_name: pulumi.Input[str]
    release: KubernetesRelease
    names: tuple[str, ...]
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
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
        for addon in args.names:
            configuration = CONFIGURATION.get(addon)
            aws.eks.Addon(
                f"{name}-{addon}",
                cluster_name=args.cluster_name,
                addon_name=addon,
                addon_version=args.release.addons[addon],
                configuration_values=json.dumps(configuration) if configuration else None,
                # The stack owns these add-ons: its settings win over manual edits.
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"addons": list(args.names)})
