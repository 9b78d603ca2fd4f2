"""VPC for a new GKE cluster: one regional subnet for the nodes with secondary ranges for pods and
services, Cloud NAT for egress (the nodes have no public addresses), and Private Google Access so
checkpoint traffic to GCS stays on Google's network.

Cloud NAT leaves through reserved static addresses, not auto-allocated ones that change as NAT
scales: an SMTP relay (alert mail) or any other allowlist can name them, and they are the stack's
output `nat_addresses`."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.config.gcp import GkeNetwork

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
    nat_addresses: list[pulumi.Output[str]]

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
        addresses = [
            gcp.compute.Address(
                f"{name}-nat-{index}",
                project=args.project,
                region=args.region,
                address_type="EXTERNAL",
                network_tier="PREMIUM",
                description="Cloud NAT egress of the spot training cluster",
                opts=child,
            )
            for index in range(args.addresses.nat_addresses)
        ]
        gcp.compute.RouterNat(
            f"{name}-nat",
            project=args.project,
            region=args.region,
            router=router.name,
            nat_ip_allocate_option="MANUAL_ONLY",
            nat_ips=[address.self_link for address in addresses],
            source_subnetwork_ip_ranges_to_nat="LIST_OF_SUBNETWORKS",
            subnetworks=[
                {"name": subnet.id, "source_ip_ranges_to_nats": ["ALL_IP_RANGES"]},
            ],
            log_config={"enable": True, "filter": "ERRORS_ONLY"},
            opts=child,
        )
        self.network, self.subnetwork = vpc.id, subnet.id
        self.nat_addresses = [address.address for address in addresses]
        self.register_outputs(
            {
                "network": self.network,
                "subnetwork": self.subnetwork,
                "nat_addresses": self.nat_addresses,
            }
        )
