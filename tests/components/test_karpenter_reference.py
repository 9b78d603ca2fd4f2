"""Karpenter's IAM against Karpenter's own reference for the pinned version: the getting-started
CloudFormation template of v1.14 (shared/schemas/karpenter-v1.14.1/cloudformation.yaml, from
aws/karpenter-provider-aws, website/content/en/v1.14/getting-started). Every action it grants the
controller is granted here, as the preview sends it, on at least the same resources and under no
condition the reference does not set; its node role's managed policies are attached to ours,
but one left out for a stated reason."""

from __future__ import annotations

import copy
import json
import re
from fnmatch import fnmatchcase

import pytest
import yaml
from previewed import Preview
from stack_files import stack_values

from components.config import load_config
from spotctl.preview.aws import ACCOUNT_ID

CONTROLLER_POLICIES = (
    "NodeLifecyclePolicy",
    "IAMIntegrationPolicy",
    "EKSIntegrationPolicy",
    "InterruptionPolicy",
    "ZonalShiftPolicy",
    "ResourceDiscoveryPolicy",
)
AWS_STACKS = ("dev", "prod")
# Left out of the nodes' role on purpose: it lets the node read every SSM parameter of the
# account (ssm:GetParameters on *), which the nodes' role never has; nodes are reached with
# `kubectl debug node/...`, not Session Manager. Karpenter neither needs nor checks it.
NODE_POLICIES_LEFT_OUT = {"arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"}
PROD_REGION = load_config(stack_values("prod")).region


class CloudFormation(yaml.SafeLoader):
    """Reads the template's short-form intrinsics (!Sub, !GetAtt, !Ref) as their plain argument."""


for _tag in ("!Sub", "!GetAtt", "!Ref"):
    CloudFormation.add_constructor(_tag, lambda loader, node: loader.construct_scalar(node))


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _substitute(text: str, names: dict[str, str]) -> str:
    """CloudFormation's ${Name} substitution; a name not given fails the test, never passes."""
    return re.sub(r"\$\{([^}]+)\}", lambda m: names[m.group(1)], text)


def reference(shared_schemas) -> dict:
    path = shared_schemas / "karpenter-v1.14.1" / "cloudformation.yaml"
    return yaml.load(path.read_text(), Loader=CloudFormation)["Resources"]


def reference_statements(resources: dict, names: dict[str, str]) -> list[dict]:
    found = []
    for policy in CONTROLLER_POLICIES:
        document = json.loads(_substitute(resources[policy]["Properties"]["PolicyDocument"], names))
        found += document["Statement"]
    return found


def _no_stricter(ours: dict, theirs: dict) -> bool:
    """Every condition of ours is one the reference sets too, allowing at least its values."""
    for operator, keys in ours.items():
        for key, values in keys.items():
            reference_values = theirs.get(operator, {}).get(key)
            if reference_values is None or not set(_as_list(reference_values)) <= set(
                _as_list(values)
            ):
                return False
    return True


def _grants(statement: dict, action: str, resource: str, condition: dict) -> bool:
    return (
        statement.get("Effect") == "Allow"
        and any(fnmatchcase(action.lower(), a.lower()) for a in _as_list(statement["Action"]))
        and any(fnmatchcase(resource, r) for r in _as_list(statement["Resource"]))
        and _no_stricter(statement.get("Condition", {}), condition)
    )


def missing_grants(expected: list[dict], policy: dict) -> list[str]:
    """The reference's (Sid, action, resource) that no statement of `policy` grants as widely."""
    ours = _as_list(policy["Statement"])
    return [
        f"{statement['Sid']}: {action} on {resource}"
        for statement in expected
        if statement["Effect"] == "Allow"
        for action in _as_list(statement["Action"])
        for resource in _as_list(statement["Resource"])
        if not any(_grants(s, action, resource, statement.get("Condition", {})) for s in ours)
    ]


def _controller(preview: Preview, shared_schemas) -> tuple[list[dict], dict]:
    """(the reference's statements for this stack's cluster, our policy as previewed)."""
    cluster = preview.one("aws:eks/cluster:Cluster")
    config = load_config(stack_values(preview.stack))
    names = {
        "AWS::Partition": "aws",
        "AWS::Region": config.region,
        "AWS::AccountId": ACCOUNT_ID,
        "AWS::URLSuffix": "amazonaws.com",
        "ClusterName": cluster.outputs["name"],
        "KarpenterNodeRole.Arn": preview.one(
            "aws:iam/role:Role", "-karpenter-identity-node"
        ).outputs["arn"],
        "KarpenterInterruptionQueue.Arn": preview.one("aws:sqs/queue:Queue").outputs["arn"],
    }
    policy = preview.one("aws:iam/rolePolicy:RolePolicy", "-karpenter-identity-controller")
    return reference_statements(reference(shared_schemas), names), json.loads(
        policy.inputs["policy"]
    )


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_controller_is_granted_all_the_reference_grants(
    stack, stack_preview, shared_schemas
) -> None:
    expected, policy = _controller(stack_preview(stack), shared_schemas)
    assert len(expected) >= 15
    assert missing_grants(expected, policy) == []


def _without(policy: dict, sid: str, *, action: str = "", resource: str = "") -> dict:
    broken = copy.deepcopy(policy)
    for statement in broken["Statement"]:
        if statement["Sid"] == sid:
            if action:
                statement["Action"] = [a for a in _as_list(statement["Action"]) if a != action]
            if resource:
                statement["Resource"] = [
                    r for r in _as_list(statement["Resource"]) if resource not in r
                ]
    return broken


def _stricter(policy: dict, sid: str, key: str, value: str) -> dict:
    broken = copy.deepcopy(policy)
    for statement in broken["Statement"]:
        if statement["Sid"] == sid:
            statement.setdefault("Condition", {}).setdefault("StringEquals", {})[key] = value
    return broken


def test_a_policy_short_of_the_reference_is_refused(prod, shared_schemas) -> None:
    expected, policy = _controller(prod, shared_schemas)
    # The first-contact failures: a spot request it cannot tag, a finalizer that cannot list.
    no_spot_tags = _without(policy, "TagOnCreate", resource=":spot-instances-request/")
    assert missing_grants(expected, no_spot_tags) == [
        "AllowScopedResourceCreationTagging: ec2:CreateTags on "
        f"arn:aws:ec2:{PROD_REGION}:*:spot-instances-request/*"
    ]
    no_list = _without(policy, "ListInstanceProfiles", action="iam:ListInstanceProfiles")
    assert missing_grants(expected, no_list) == [
        "AllowUnscopedInstanceProfileListAction: iam:ListInstanceProfiles on *"
    ]
    no_status = _without(policy, "ReadTheRegion", action="ec2:DescribeInstanceStatus")
    assert missing_grants(expected, no_status) == [
        "AllowRegionalReadActions: ec2:DescribeInstanceStatus on *"
    ]
    # A condition the reference does not set narrows the grant: refused as well.
    narrowed = _stricter(policy, "FindTheApiServer", "aws:RequestedRegion", "eu-west-1")
    cluster_arn = prod.one("aws:eks/cluster:Cluster").outputs["arn"]
    assert missing_grants(expected, narrowed) == [
        f"AllowAPIServerEndpointDiscovery: eks:DescribeCluster on {cluster_arn}"
    ]


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_node_role_has_the_reference_node_role_s_policies(
    stack, stack_preview, shared_schemas
) -> None:
    preview = stack_preview(stack)
    node_role = reference(shared_schemas)["KarpenterNodeRole"]["Properties"]
    names = {"AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com"}
    expected = {_substitute(arn, names) for arn in node_role["ManagedPolicyArns"]}
    assert expected >= NODE_POLICIES_LEFT_OUT, "left out of a policy the reference no longer has"
    role = preview.one("aws:iam/role:Role", "-karpenter-identity-node")
    attached = {
        a.inputs["policyArn"]
        for a in preview.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.name.startswith(role.name + "-")
    }
    assert expected - NODE_POLICIES_LEFT_OUT <= attached, sorted(expected - attached)
    (trust,) = node_role["AssumeRolePolicyDocument"]["Statement"]
    service = _substitute(trust["Principal"]["Service"], names)
    (ours,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert ours["Principal"] == {"Service": service}
    assert set(_as_list(trust["Action"])) <= set(_as_list(ours["Action"]))
