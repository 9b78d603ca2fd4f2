"""VPC for a new cluster: a public and a private subnet in every zone, NAT egress, and an S3
gateway endpoint so checkpoint traffic never pays for NAT."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class NetworkArgs:
    cluster_name: str
    region: str
    zones: list[str]
    cidr: str
    nat_gateway_per_zone: bool = False
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.zones:
            raise ValueError("NetworkArgs.zones: at least one zone is required")
        if len(self.zones) > 8:
            raise ValueError("NetworkArgs.zones: at most 8 zones fit the subnet plan")


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: pulumi.Output[list[str]]
    public_subnet_ids: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:network:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # /20 per subnet: private ones first (nodes need the addresses), public ones from the top.
        blocks = list(ipaddress.ip_network(args.cidr).subnets(new_prefix=20))
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**args.tags, "Name": f"{name}-vpc"},
            opts=child,
        )
        gateway = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={**args.tags, "Name": f"{name}-igw"}, opts=child
        )
        public_table = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": gateway.id}],
            tags={**args.tags, "Name": f"{name}-public"},
            opts=child,
        )
        public = []
        for index, zone in enumerate(args.zones):
            subnet = aws.ec2.Subnet(
                f"{name}-public-{zone}",
                vpc_id=vpc.id,
                availability_zone=zone,
                cidr_block=str(blocks[-1 - index]),
                tags={**args.tags, **cluster_tag, "kubernetes.io/role/elb": "1"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{zone}",
                subnet_id=subnet.id,
                route_table_id=public_table.id,
                opts=child,
            )
            public.append(subnet)
        # One NAT gateway is cheap; one per zone keeps egress alive through a zone outage.
        nat_zones = args.zones if args.nat_gateway_per_zone else args.zones[:1]
        nats = {}
        for zone, subnet in zip(args.zones, public, strict=True):
            if zone not in nat_zones:
                continue
            address = aws.ec2.Eip(f"{name}-nat-{zone}", domain="vpc", tags=args.tags, opts=child)
            nats[zone] = aws.ec2.NatGateway(
                f"{name}-nat-{zone}",
                allocation_id=address.id,
                subnet_id=subnet.id,
                tags={**args.tags, "Name": f"{name}-nat-{zone}"},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]),
            )
        private, private_tables = [], []
        for index, zone in enumerate(args.zones):
            nat = nats.get(zone, nats[args.zones[0]])
            table = aws.ec2.RouteTable(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                tags={**args.tags, "Name": f"{name}-private-{zone}"},
                opts=child,
            )
            subnet = aws.ec2.Subnet(
                f"{name}-private-{zone}",
                vpc_id=vpc.id,
                availability_zone=zone,
                cidr_block=str(blocks[index]),
                tags={**args.tags, **cluster_tag, "kubernetes.io/role/internal-elb": "1"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{zone}",
                subnet_id=subnet.id,
                route_table_id=table.id,
                opts=child,
            )
            private.append(subnet)
            private_tables.append(table)
        # Checkpoint traffic goes to S3 through a (free) gateway endpoint, never through NAT.
        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[table.id for table in private_tables],
            tags={**args.tags, "Name": f"{name}-s3"},
            opts=child,
        )

        self.vpc_id = vpc.id
        self.private_subnet_ids = pulumi.Output.all(*[s.id for s in private])
        self.public_subnet_ids = pulumi.Output.all(*[s.id for s in public])
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "private_subnet_ids": self.private_subnet_ids,
                "public_subnet_ids": self.public_subnet_ids,
            }
        )
