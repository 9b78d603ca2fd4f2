"""The GKE cluster: a regional Standard cluster created with its VPC, or an existing one attached.

Either way the component exposes the same outputs: the cluster's name and location, its
Workload Identity pool, and a kubeconfig for a pulumi_kubernetes Provider.

The pool `PROJECT.svc.id.goog` exists only once the project's first Workload Identity cluster
does, so the pool is an output of the cluster: whatever names it waits for the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.config.gcp import ExistingGkeCluster, NewGkeCluster
from components.gcp.kms import ServiceKey, ServiceKeyArgs
from components.gcp.network import PODS_RANGE, SERVICES_RANGE, Network, NetworkArgs
from components.gcp.nodepools import locked_down_node
from components.gcp.services import invoke_options
from components.kubeconfig import exec_kubeconfig

# gke-gcloud-auth-plugin mints short-lived tokens from the caller's gcloud credentials.
AUTH_PLUGIN = {
    "command": "gke-gcloud-auth-plugin",
    "installHint": "Install gke-gcloud-auth-plugin: gcloud components install "
    "gke-gcloud-auth-plugin",
    "provideClusterInfo": True,
}


@dataclass(frozen=True)
class ClusterArgs:
    project: str
    region: str
    zones: list[str]
    node_service_account: pulumi.Input[str]
    create: NewGkeCluster | None = None
    existing: ExistingGkeCluster | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # RoleBindings name Google Groups: an attached cluster must run Google Groups for RBAC.
    rbac_groups: bool = False

    def __post_init__(self) -> None:
        if (self.create is None) == (self.existing is None):
            raise ValueError("ClusterArgs: set exactly one of 'create' or 'existing'")
        outside = [z for z in self.zones if not z.startswith(f"{self.region}-")]
        if not self.zones or outside:
            raise ValueError(
                f"ClusterArgs.zones: {self.zones} must be one or more zones of {self.region}"
            )


class Cluster(pulumi.ComponentResource):
    name: pulumi.Output[str]
    location: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    certificate_authority: pulumi.Output[str]
    workload_pool: pulumi.Output[str]
    # Cloud NAT's static egress addresses of a created cluster's VPC (none for an attached one).
    nat_addresses: list[pulumi.Output[str]]
    kubeconfig: pulumi.Output[str]

    def __init__(
        self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:Cluster", name, None, opts)
        pool = workload_pool(args.project)
        if args.create is not None:
            self._create(name, args, args.create, pool, opts)
        else:
            self._attach(args, args.existing, pool, opts)
        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(self.name, self.endpoint, self.certificate_authority).apply(
                lambda values: exec_kubeconfig(
                    values[0], f"https://{values[1]}", values[2], AUTH_PLUGIN
                )
            )
        )
        self.register_outputs(
            {
                "name": self.name,
                "location": self.location,
                "endpoint": self.endpoint,
                "workload_pool": self.workload_pool,
                "kubeconfig": self.kubeconfig,
            }
        )

    def _create(
        self,
        name: str,
        args: ClusterArgs,
        create: NewGkeCluster,
        pool: str,
        opts: pulumi.ResourceOptions | None,
    ) -> None:
        child = pulumi.ResourceOptions(parent=self)
        network = Network(
            f"{name}-network",
            NetworkArgs(project=args.project, region=args.region, addresses=create.network),
            opts=child,
        )
        project = gcp.organizations.get_project_output(
            project_id=args.project, opts=invoke_options(self, opts)
        )
        # The GKE service agent encrypts Secrets at rest with this key (envelope encryption).
        secrets_key = ServiceKey(
            f"{name}-secrets",
            ServiceKeyArgs(
                project=args.project,
                location=args.region,
                agent_member=project.number.apply(
                    lambda number: (
                        f"serviceAccount:service-{number}"
                        "@container-engine-robot.iam.gserviceaccount.com"
                    )
                ),
                labels=args.labels,
            ),
            opts=child,
        )
        private_endpoint_only = not create.authorized_networks
        cluster = gcp.container.Cluster(
            f"{name}-gke",
            name=create.name,
            project=args.project,
            location=args.region,
            node_locations=list(args.zones),
            network=network.network,
            subnetwork=network.subnetwork,
            release_channel={"channel": create.release_channel},
            min_master_version=create.version,
            # Pools are separate resources; the default one goes as soon as the cluster exists.
            remove_default_node_pool=True,
            initial_node_count=1,
            node_config=locked_down_node(args.node_service_account),
            workload_identity_config={"workload_pool": pool},
            # Dataplane V2 enforces NetworkPolicy itself (no Calico add-on).
            datapath_provider="ADVANCED_DATAPATH",
            ip_allocation_policy={
                "cluster_secondary_range_name": PODS_RANGE,
                "services_secondary_range_name": SERVICES_RANGE,
            },
            private_cluster_config={
                "enable_private_nodes": True,
                "enable_private_endpoint": private_endpoint_only,
                "master_ipv4_cidr_block": create.network.control_plane_cidr,
            },
            master_authorized_networks_config={
                "cidr_blocks": [
                    {"cidr_block": n.cidr, "display_name": n.name}
                    for n in create.authorized_networks
                ],
                "gcp_public_cidrs_access_enabled": False,
            },
            database_encryption={"state": "ENCRYPTED", "key_name": secrets_key.id},
            authenticator_groups_config=(
                {"security_group": create.rbac_security_group}
                if create.rbac_security_group
                else None
            ),
            enable_shielded_nodes=True,
            enable_legacy_abac=False,
            master_auth={"client_certificate_config": {"issue_client_certificate": False}},
            logging_config={"enable_components": ["SYSTEM_COMPONENTS", "APISERVER", "WORKLOADS"]},
            monitoring_config={
                # DCGM: GKE runs the DCGM exporter on the GPU nodes whose driver it installed,
                # into Managed Service for Prometheus (per-GPU utilisation, memory, errors).
                "enable_components": ["SYSTEM_COMPONENTS", "DCGM"],
                "managed_prometheus": {"enabled": True},
            },
            cost_management_config={"enabled": True},
            resource_labels=args.labels,
            deletion_protection=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[secrets_key.grant]),
        )
        self.name, self.location = cluster.name, cluster.location
        self.nat_addresses = network.nat_addresses
        self.workload_pool = cluster.workload_identity_config.apply(
            lambda config: config.workload_pool
        )
        self.endpoint = cluster.endpoint
        self.certificate_authority = cluster.master_auth.apply(
            lambda auth: auth.cluster_ca_certificate
        )

    def _attach(
        self,
        args: ClusterArgs,
        existing: ExistingGkeCluster,
        pool: str,
        opts: pulumi.ResourceOptions | None,
    ) -> None:
        found = gcp.container.get_cluster_output(
            name=existing.name,
            location=args.region,
            project=args.project,
            opts=invoke_options(self, opts),
        )
        self.name, self.location = found.name, pulumi.Output.from_input(args.region)
        self.nat_addresses = []
        self.endpoint = found.endpoint
        self.certificate_authority = found.master_auths.apply(
            lambda auths: auths[0].cluster_ca_certificate
        )
        if args.rbac_groups:
            found.authenticator_groups_configs.apply(
                lambda configs, cluster=existing.name: _require_groups_for_rbac(configs, cluster)
            )
        # Training identities bind through Workload Identity: without it no pod reaches GCS.
        self.workload_pool = found.workload_identity_configs.apply(
            lambda configs, cluster=existing.name: _require_pool(configs, pool, cluster)
        )


def workload_pool(project: str) -> str:
    """The Workload Identity pool of a project's GKE clusters."""
    return f"{project}.svc.id.goog"


def _require_groups_for_rbac(configs: list | None, cluster: str) -> None:
    if not any(c.security_group for c in configs or []):
        pulumi.log.error(
            f"gcp.cluster.existing: cluster {cluster!r} does not run Google Groups for RBAC, so "
            "the team namespaces' RoleBindings to Google Groups match no one; enable it (gcloud "
            "container clusters update --security-group=gke-security-groups@<your domain>)"
        )


def _require_pool(configs: list, pool: str, cluster: str) -> str:
    pools = [c.workload_pool for c in configs or []]
    if pool not in pools:
        pulumi.log.error(
            f"gcp.cluster.existing: cluster {cluster!r} has no Workload Identity pool {pool!r}; "
            "enable Workload Identity on it (gcloud container clusters update --workload-pool)"
        )
    return pool
