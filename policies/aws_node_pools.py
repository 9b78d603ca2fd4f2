"""Spot node pools on EKS: tainted, so only checkpoint-capable jobs land there, and diversified, so
one instance type or zone running dry does not empty the pool."""

from __future__ import annotations

from policies.inputs import as_list, dig
from policies.rule import ADVISORY, MANDATORY, ResourceRule

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
# PREFER_NO_SCHEDULE lets any pod land on the node when the cluster is short of room.
GUARDING_EFFECTS = ("NO_SCHEDULE", "NO_EXECUTE")


def _spot_node_group(args) -> bool:
    return args.resource_type == NODE_GROUP and args.props.get("capacityType") == "SPOT"


def _check_tainted(args, report_violation, _settings) -> None:
    if not _spot_node_group(args):
        return
    taints = as_list(args.props.get("taints"))
    if not any(dig(t, "effect") in GUARDING_EFFECTS for t in taints):
        report_violation(
            f"spot node group '{args.name}' has no taint with effect "
            f"{' or '.join(GUARDING_EFFECTS)}"
        )


def _check_diversified(args, report_violation, settings) -> None:
    if not _spot_node_group(args):
        return
    types = set(as_list(args.props.get("instanceTypes")))
    subnets = set(as_list(args.props.get("subnetIds")))
    if len(types) < settings["minInstanceTypes"]:
        report_violation(
            f"spot node group '{args.name}' has {len(types)} instance type(s); "
            f"diversify over at least {settings['minInstanceTypes']:g}"
        )
    if len(subnets) < settings["minSubnets"]:
        report_violation(
            f"spot node group '{args.name}' spans {len(subnets)} subnet(s); "
            f"spread it over at least {settings['minSubnets']:g} (one per zone)"
        )


POLICIES = [
    ResourceRule(
        "eks-spot-pool-tainted",
        "EKS node groups with capacityType SPOT carry a NoSchedule or NoExecute taint.",
        "Untainted spot nodes attract services and jobs that cannot survive a two-minute recall.",
        _check_tainted,
        MANDATORY,
    ),
    ResourceRule(
        "eks-spot-pool-diversified",
        "EKS spot node groups list at least minInstanceTypes instance types and minSubnets "
        "subnets.",
        "Spot capacity runs dry per instance type and zone; diversification keeps the pool "
        "alive and lowers the interruption rate.",
        _check_diversified,
        ADVISORY,
        config={
            "minInstanceTypes": {"type": "integer", "minimum": 1, "default": 3},
            "minSubnets": {"type": "integer", "minimum": 1, "default": 2},
        },
    ),
]
