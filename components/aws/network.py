"""VPC for a new cluster: a public and a private subnet in every zone, one NAT gateway."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class NetworkArgs:
    cluster_name: str
    zones: list[str]
    cidr: str
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
        public, private = [], []
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
        nat_ip = aws.ec2.Eip(f"{name}-nat", domain="vpc", tags=args.tags, opts=child)
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            allocation_id=nat_ip.id,
            subnet_id=public[0].id,
            tags={**args.tags, "Name": f"{name}-nat"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[gateway]),
        )
        private_table = aws.ec2.RouteTable(
            f"{name}-private",
            vpc_id=vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
            tags={**args.tags, "Name": f"{name}-private"},
            opts=child,
        )
        for index, zone in enumerate(args.zones):
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
                route_table_id=private_table.id,
                opts=child,
            )
            private.append(subnet)

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
