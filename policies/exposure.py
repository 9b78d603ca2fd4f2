"""Exposure: a cluster's API endpoint is reachable from named networks only, and no trust or
grant names a wildcard principal.

EKS (aws:eks/cluster:Cluster): with `endpointPublicAccess` unset or true, the endpoint is public,
and `publicAccessCidrs` unset means 0.0.0.0/0 (EKS API reference, VpcConfigRequest). GKE
(gcp:container/cluster:Cluster): a public endpoint without `masterAuthorizedNetworksConfig`
accepts any address; with it, only its `cidrBlocks`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from policies.inputs import as_list, dig, statements
from policies.rule import MANDATORY, ResourceRule

EKS_CLUSTER = "aws:eks/cluster:Cluster"
GKE_CLUSTER = "gcp:container/cluster:Cluster"
ROLE = "aws:iam/role:Role"
# GCP members that stand for everyone (IAM overview, "Principal identifiers").
GCP_EVERYONE = ("allUsers", "allAuthenticatedUsers")


def _endpoint_networks(args) -> list[str] | None:
    """The networks that reach the cluster's public endpoint; None when it has none."""
    props = args.props
    if args.resource_type == EKS_CLUSTER:
        if dig(props, "vpcConfig", "endpointPublicAccess", default=True) is False:
            return None
        return list(as_list(dig(props, "vpcConfig", "publicAccessCidrs"))) or ["0.0.0.0/0"]
    if args.resource_type == GKE_CLUSTER:
        if dig(props, "privateClusterConfig", "enablePrivateEndpoint") is True:
            return None
        authorized = dig(props, "masterAuthorizedNetworksConfig")
        if authorized is None:
            return ["0.0.0.0/0"]
        blocks = as_list(dig(authorized, "cidrBlocks"))
        return [dig(block, "cidrBlock", default="") for block in blocks]
    return None


def _check_endpoint_networks(args, report_violation, settings) -> None:
    networks = _endpoint_networks(args)
    least = int(settings["minPrefixLength"])
    for cidr in networks or ():
        try:
            network = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            report_violation(f"'{args.name}': {cidr!r} is not a network")
            continue
        # An organisation's IPv6 block is a /48 where its IPv4 block is a /16.
        widest = least if network.version == 4 else least + 32
        if network.prefixlen < widest:
            report_violation(
                f"'{args.name}' opens its API endpoint to {cidr} ({network.num_addresses:,} "
                f"addresses, wider than /{widest}): list the networks that run pulumi up and "
                "kubectl, or waive it with an expiry"
            )


def _wildcard(principal: str) -> bool:
    return "*" in principal or "?" in principal


def _aws_principals(statement: Mapping) -> list[str]:
    principal = statement.get("Principal")
    if isinstance(principal, str):
        return [principal]
    if isinstance(principal, Mapping):
        return [str(p) for values in principal.values() for p in as_list(values)]
    return []


def _check_no_wildcard_principal(args, report_violation, _settings) -> None:
    if args.resource_type == ROLE:
        for statement in statements(args.props.get("assumeRolePolicy")):
            if statement.get("Effect") != "Allow":
                continue
            if "NotPrincipal" in statement:
                report_violation(f"'{args.name}' trusts everyone but a NotPrincipal list")
            for principal in _aws_principals(statement):
                if _wildcard(principal):
                    report_violation(
                        f"'{args.name}' trusts the wildcard principal {principal!r}: name the "
                        "roles or users that may assume it"
                    )
        return
    if args.resource_type.startswith("gcp:") and (
        "IAMMember" in args.resource_type or "IAMBinding" in args.resource_type
    ):
        members = [args.props.get("member"), *as_list(args.props.get("members"))]
        for member in filter(None, members):
            if member in GCP_EVERYONE or _wildcard(member):
                report_violation(
                    f"'{args.name}' grants {args.props.get('role', 'a role')} to {member!r}: "
                    "name the groups, users or service accounts"
                )


POLICIES = [
    ResourceRule(
        "cluster-endpoint-not-internet-open",
        "EKS public endpoints (publicAccessCidrs) and GKE authorized networks list no network "
        "wider than /minPrefixLength; an unset list is the whole internet.",
        "The Kubernetes API is the platform's front door: opened to the internet (0.0.0.0/0, or "
        "its halves 0.0.0.0/1 and 128.0.0.0/1) it is one leaked token or CVE from every team's "
        "jobs and secrets.",
        _check_endpoint_networks,
        MANDATORY,
        config={"minPrefixLength": {"type": "integer", "minimum": 1, "maximum": 32, "default": 16}},
        fix=(
            "List only the egress networks of your office, VPN and CI runners, each "
            "/minPrefixLength or narrower, in aws.cluster.create.public_endpoint_cidrs (EKS) or "
            "gcp.cluster.create.authorized_networks (GKE); an empty EKS list makes the endpoint "
            "private."
        ),
    ),
    ResourceRule(
        "iam-no-wildcard-principal",
        "IAM role trust policies and GCP IAM grants name their principals: no '*' or '?' in a "
        "principal, no NotPrincipal, no allUsers or allAuthenticatedUsers.",
        "A wildcard among a team's engineers (role/*) hands the team's rights to every role of "
        "the account, or of every account.",
        _check_no_wildcard_principal,
        MANDATORY,
        fix=(
            "Name each principal exactly (a role ARN, a group:, user: or serviceAccount: member); "
            "replace NotPrincipal with a Principal list and allUsers or allAuthenticatedUsers with "
            "groups."
        ),
    ),
]
