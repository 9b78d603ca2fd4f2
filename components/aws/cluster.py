"""The EKS cluster: created with its network and network add-ons, or attached to an existing one.

Either way the component exposes the same outputs: the cluster name, ARN and Kubernetes version
(node groups follow it), the subnets for node groups, and a kubeconfig for a pulumi_kubernetes
Provider. `network_addons` is what a node needs before it can join (empty for an attached
cluster, whose owner manages its add-ons).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.aws.addons import NETWORK_ADDONS, ClusterAddons, ClusterAddonsArgs
from components.aws.network import Network, NetworkArgs
from components.config import ExistingCluster, NewCluster
from components.versions import KUBERNETES_RELEASES, UPGRADE_SUPPORT_TYPE

# Control-plane logs that answer "who changed what" during an incident.
CLUSTER_LOG_TYPES = ["api", "audit", "authenticator"]
EKS_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    ],
}


@dataclass(frozen=True)
class ClusterArgs:
    region: str
    zones: list[str]
    create: NewCluster | None = None
    existing: ExistingCluster | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.create is None) == (self.existing is None):
            raise ValueError("ClusterArgs: set exactly one of 'create' or 'existing'")


class Cluster(pulumi.ComponentResource):
    name: pulumi.Output[str]
    arn: pulumi.Output[str]
    version: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    certificate_authority: pulumi.Output[str]
    node_subnet_ids: pulumi.Output[list[str]]
    # The security group EKS gives the cluster; managed node groups put their nodes in it.
    node_security_group_ids: pulumi.Output[list[str]]
    kubeconfig: pulumi.Output[str]

    def __init__(
        self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:cluster:Cluster", name, None, opts)
        self.network_addons: list[pulumi.Resource] = []
        if args.create is not None:
            self._create(name, args, args.create)
        else:
            self._attach(args.existing)
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.name, self.endpoint, self.certificate_authority).apply(
                lambda values: kubeconfig(*values, region=args.region)
            )
        )
        self.register_outputs(
            {
                "name": self.name,
                "arn": self.arn,
                "version": self.version,
                "endpoint": self.endpoint,
                "node_subnet_ids": self.node_subnet_ids,
                "node_security_group_ids": self.node_security_group_ids,
                "kubeconfig": self.kubeconfig,
            }
        )

    def _create(self, name: str, args: ClusterArgs, create: NewCluster) -> None:
        child = pulumi.ResourceOptions(parent=self)
        network = Network(
            f"{name}-network",
            NetworkArgs(
                cluster_name=create.name,
                region=args.region,
                zones=args.zones,
                cidr=create.vpc_cidr,
                nat_gateway_per_zone=create.nat_gateway_per_zone,
                tags=args.tags,
            ),
            opts=child,
        )
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=json.dumps(EKS_TRUST),
            tags=args.tags,
            opts=child,
        )
        attachment = aws.iam.RolePolicyAttachment(
            f"{name}-role-cluster-policy",
            role=role.name,
            policy_arn="arn:aws:iam::aws:policy/AmazonEKSClusterPolicy",
            opts=child,
        )
        secrets_key = aws.kms.Key(
            f"{name}-secrets",
            description=f"Envelope encryption of Kubernetes secrets in {create.name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=args.tags,
            opts=child,
        )
        cluster = aws.eks.Cluster(
            f"{name}-eks",
            name=create.name,
            version=create.version,
            role_arn=role.arn,
            vpc_config={
                "subnet_ids": pulumi.Output.all(
                    network.private_subnet_ids, network.public_subnet_ids
                ).apply(lambda ids: ids[0] + ids[1]),
                "endpoint_private_access": True,
                "endpoint_public_access": bool(create.public_endpoint_cidrs),
                "public_access_cidrs": create.public_endpoint_cidrs or None,
            },
            access_config={
                "authentication_mode": "API",
                "bootstrap_cluster_creator_admin_permissions": True,
            },
            encryption_config={"resources": ["secrets"], "provider": {"key_arn": secrets_key.arn}},
            enabled_cluster_log_types=CLUSTER_LOG_TYPES,
            upgrade_policy={"support_type": UPGRADE_SUPPORT_TYPE},
            # The stack manages the CNI, kube-proxy and CoreDNS as EKS add-ons at pinned versions.
            bootstrap_self_managed_addons=False,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attachment]),
        )
        # The Pod Identity agent is how pods get their roles; no long-lived keys anywhere.
        self.network_addons = [
            ClusterAddons(
                f"{name}-network-addons",
                ClusterAddonsArgs(
                    cluster_name=cluster.name,
                    release=KUBERNETES_RELEASES[create.version],
                    names=NETWORK_ADDONS,
                    tags=args.tags,
                ),
                opts=child,
            )
        ]
        self.name, self.arn, self.version = cluster.name, cluster.arn, cluster.version
        self.endpoint = cluster.endpoint
        self.certificate_authority = cluster.certificate_authority.apply(lambda ca: ca.data)
        self.node_subnet_ids = network.private_subnet_ids
        self.node_security_group_ids = cluster.vpc_config.apply(
            lambda vpc: [vpc.cluster_security_group_id]
        )

    def _attach(self, existing: ExistingCluster) -> None:
        found = aws.eks.get_cluster_output(
            name=existing.name, opts=pulumi.InvokeOutputOptions(parent=self)
        )
        self.name, self.arn, self.version = found.name, found.arn, found.version
        self.endpoint = found.endpoint
        self.certificate_authority = found.certificate_authorities.apply(lambda cas: cas[0].data)
        self.node_subnet_ids = pulumi.Output.from_input(list(existing.subnet_ids))
        self.node_security_group_ids = found.vpc_config.apply(
            lambda vpc: [vpc.cluster_security_group_id]
        )


def kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token` (short-lived, no stored secret)."""
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region],
        }
    }
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": cluster_name,
                    "cluster": {"server": endpoint, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": cluster_name, "user": user}],
            "contexts": [
                {"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}
            ],
            "current-context": cluster_name,
        }
    )
