"""Node pools on EKS: spot ones tainted, so only checkpoint-capable jobs land there, and
diversified, so one instance type or zone running dry does not empty the pool; and every node's
instance metadata out of pods' reach."""

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


LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
EC2_NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"


def _check_imds(args, report_violation, settings) -> None:
    """IMDSv2 only, with a hop limit that keeps pods (one hop further) out."""
    if args.resource_type == LAUNCH_TEMPLATE:
        options = args.props.get("metadataOptions") or {}
        tokens, hops = dig(options, "httpTokens"), dig(options, "httpPutResponseHopLimit")
    elif args.resource_type == EC2_NODE_CLASS:
        # Karpenter's defaults when unset are required and 1.
        options = dig(args.props, "spec", "metadataOptions", default={})
        tokens = dig(options, "httpTokens", default="required")
        hops = dig(options, "httpPutResponseHopLimit", default=1)
    else:
        return
    if tokens != "required":
        report_violation(f"'{args.name}' allows IMDSv1 (httpTokens is {tokens or 'unset'})")
    if hops is None or hops > settings["maxHopLimit"]:
        report_violation(
            f"'{args.name}' lets IMDS answer "
            f"{'the default' if hops is None else format(hops, 'g')} hop(s) away; above "
            f"{settings['maxHopLimit']:g}, pods read the node role's credentials"
        )


POLICIES = [
    ResourceRule(
        "eks-spot-pool-tainted",
        "EKS node groups with capacityType SPOT carry a NoSchedule or NoExecute taint.",
        "Untainted spot nodes attract services and jobs that cannot survive a two-minute recall.",
        _check_tainted,
        MANDATORY,
        fix=(
            "Add a taint with effect NO_SCHEDULE (or NO_EXECUTE) to the SPOT node group; "
            "checkpoint-capable jobs tolerate it."
        ),
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
        fix=(
            "List at least minInstanceTypes instance types of the GPU class "
            "(gpu_classes[].instance_types, from components/catalog.yaml) and one subnet per zone "
            "in at least minSubnets zones; where the catalog has fewer types for the class, waive "
            "it in policies/waivers.yaml with a reason and an expiry."
        ),
    ),
    ResourceRule(
        "ec2-imds-pods-kept-out",
        "Launch templates and Karpenter EC2NodeClasses require IMDSv2 tokens and a PUT response "
        "hop limit of at most maxHopLimit.",
        "With a hop limit of 2 every pod can read the node role's credentials; training pods learn "
        "of a recall from the drain instead, with a deadline that allows for its lag.",
        _check_imds,
        MANDATORY,
        config={"maxHopLimit": {"type": "integer", "minimum": 1, "default": 1}},
        fix=(
            "Set metadataOptions httpTokens: required and httpPutResponseHopLimit: 1 on the launch "
            "template or EC2NodeClass."
        ),
    ),
]
