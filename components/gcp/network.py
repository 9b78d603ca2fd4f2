"""VPC for a new GKE cluster: one regional subnet for the nodes with secondary ranges for pods and
services, Cloud NAT for egress (the nodes have no public addresses), and Private Google Access so
checkpoint traffic to GCS stays on Google's network."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.gcp.config import GkeNetwork

# Names of the subnet's secondary ranges, as the cluster's IP allocation policy refers to them.
PODS_RANGE = "pods"
SERVICES_RANGE = "services"


@dataclass(frozen=True)
class NetworkArgs:
    project: str
    region: str
    addresses: GkeNetwork


class Network(pulumi.ComponentResource):
    network: pulumi.Output[str]
    subnetwork: pulumi.Output[str]

    def __init__(
        self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        vpc = gcp.compute.Network(
            f"{name}-vpc",
            project=args.project,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            opts=child,
        )
        subnet = gcp.compute.Subnetwork(
            f"{name}-nodes",
            project=args.project,
            region=args.region,
            network=vpc.id,
            ip_cidr_range=args.addresses.nodes_cidr,
            secondary_ip_ranges=[
                {"range_name": PODS_RANGE, "ip_cidr_range": args.addresses.pods_cidr},
                {"range_name": SERVICES_RANGE, "ip_cidr_range": args.addresses.services_cidr},
            ],
            private_ip_google_access=True,
            log_config={
                "aggregation_interval": "INTERVAL_5_MIN",
                "flow_sampling": 0.5,
                "metadata": "INCLUDE_ALL_METADATA",
            },
            opts=child,
        )
        router = gcp.compute.Router(
            f"{name}-router",
            project=args.project,
            region=args.region,
            network=vpc.id,
            opts=child,
        )
        gcp.compute.RouterNat(
            f"{name}-nat",
            project=args.project,
            region=args.region,
            router=router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
            subnetworks=[
                {"name": subnet.id, "source_ip_ranges_to_nats": ["ALL_IP_RANGES"]},
            ],
            log_config={"enable": True, "filter": "ERRORS_ONLY"},
            opts=child,
        )
        self.network, self.subnetwork = vpc.id, subnet.id
        self.register_outputs({"network": self.network, "subnetwork": self.subnetwork})
