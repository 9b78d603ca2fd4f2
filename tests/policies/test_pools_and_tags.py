"""Spot node pools (EKS, GKE) and cost tags: compliant, violating and missing-property cases."""

from __future__ import annotations

import json

import pytest
from spot_policy_cases import PACK_DIR, TAGS, resource

from spotctl.preview.analyzer import PolicyAnalyzer

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
NODE_POOL = "gcp:container/nodePool:NodePool"
SPOT_GROUP = {
    "capacityType": "SPOT",
    "instanceTypes": ["g5.12xlarge", "g6.12xlarge", "g6e.12xlarge"],
    "subnetIds": ["subnet-a", "subnet-b"],
    "taints": [{"key": "capacity-type", "value": "spot", "effect": "NO_SCHEDULE"}],
    "tags": TAGS,
}


@pytest.mark.parametrize(
    ("case", "inputs", "violates"),
    [
        ("compliant", SPOT_GROUP, False),
        (
            "violating: soft taint",
            {**SPOT_GROUP, "taints": [{"key": "k", "effect": "PREFER_NO_SCHEDULE"}]},
            True,
        ),
        ("missing: no taints", {k: v for k, v in SPOT_GROUP.items() if k != "taints"}, True),
        ("on-demand needs none", {**SPOT_GROUP, "capacityType": "ON_DEMAND", "taints": []}, False),
    ],
)
def test_eks_spot_pool_tainted(violations, case, inputs, violates):
    found = violations("eks-spot-pool-tainted", resource(NODE_GROUP, "spot", inputs))
    assert found == (
        ["spot node group 'spot' has no taint with effect NO_SCHEDULE or NO_EXECUTE"]
        if violates
        else []
    ), case


@pytest.mark.parametrize(
    ("case", "inputs", "expected"),
    [
        ("compliant", SPOT_GROUP, []),
        (
            "violating: two types",
            {**SPOT_GROUP, "instanceTypes": ["g5.12xlarge", "g6.12xlarge"]},
            ["2 instance type(s)"],
        ),
        (
            "violating: one subnet",
            {**SPOT_GROUP, "subnetIds": ["subnet-a", "subnet-a"]},
            ["1 subnet(s)"],
        ),
        (
            "missing: no types, no subnets",
            {"capacityType": "SPOT", "taints": SPOT_GROUP["taints"]},
            ["0 instance type(s)", "0 subnet(s)"],
        ),
    ],
)
def test_eks_spot_pool_diversified(violations, case, inputs, expected):
    found = violations("eks-spot-pool-diversified", resource(NODE_GROUP, "spot", inputs))
    assert len(found) == len(expected) and all(
        e in m for e, m in zip(expected, found, strict=True)
    ), case


def test_diversification_thresholds_are_configurable():
    config = {"eks-spot-pool-diversified": {"minInstanceTypes": 4, "minSubnets": 1}}
    with PolicyAnalyzer(PACK_DIR, project="p", stack="s", policy_config=config) as strict:
        report = strict.analyze([resource(NODE_GROUP, "spot", SPOT_GROUP)])
    assert [v.message.splitlines()[-1] for v in report.violations] == [
        "spot node group 'spot' has 3 instance type(s); diversify over at least 4"
    ]


@pytest.mark.parametrize(
    ("case", "node_config", "violates"),
    [
        (
            "compliant",
            {
                "spot": True,
                "taints": [
                    {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NO_SCHEDULE"}
                ],
            },
            False,
        ),
        (
            "violating: soft taint",
            {"spot": True, "taints": [{"key": "s", "value": "t", "effect": "PREFER_NO_SCHEDULE"}]},
            True,
        ),
        ("missing: preemptible without taints", {"preemptible": True}, True),
        ("standard pool needs none", {"machineType": "n2-standard-8"}, False),
    ],
)
def test_gke_spot_pool_tainted(violations, case, node_config, violates):
    found = violations(
        "gke-spot-pool-tainted", resource(NODE_POOL, "gpu", {"nodeConfig": node_config})
    )
    assert bool(found) == violates, case


@pytest.mark.parametrize(
    ("case", "type_", "inputs", "expected"),
    [
        ("compliant", "aws:sqs/queue:Queue", {"tags": TAGS}, []),
        (
            "violating: no capacity-type",
            "aws:sqs/queue:Queue",
            {"tags": {"team": "a", "env": "b"}},
            ["capacity-type"],
        ),
        ("violating: empty value", "aws:sqs/queue:Queue", {"tags": {**TAGS, "team": ""}}, ["team"]),
        ("missing: no tags", "aws:s3/bucket:Bucket", {}, ["team, env, capacity-type"]),
        ("not taggable", "aws:s3/bucketVersioning:BucketVersioning", {}, []),
        ("not aws", "kubernetes:core/v1:Namespace", {}, []),
    ],
)
def test_cost_tags(violations, case, type_, inputs, expected):
    found = violations("aws-cost-tags-present", resource(type_, "r", inputs))
    assert [m.split(": ")[-1] for m in found] == expected, case


def test_cost_tags_from_an_explicit_providers_default_tags(violations):
    provider = resource(
        "pulumi:providers:aws", "aws", {"region": "us-west-2", "defaultTags": {"tags": TAGS}}
    )
    queue = resource("aws:sqs/queue:Queue", "q", {}, provider=f"{provider.urn}::id")
    assert violations("aws-cost-tags-present", provider, queue) == []


def test_cost_tags_from_the_stack_configured_default_provider():
    config = {"aws:defaultTags": json.dumps({"tags": {"team": "a", "env": "b"}})}
    with PolicyAnalyzer(PACK_DIR, project="p", stack="s", stack_config=config) as pack:
        report = pack.analyze(
            [resource("aws:sqs/queue:Queue", "q", {"tags": {"capacity-type": "spot"}})]
        )
    assert [v.policy for v in report.violations] == []


LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
IMDS = {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1}


@pytest.mark.parametrize(
    ("case", "node", "expected"),
    [
        (
            "compliant launch template",
            resource(LAUNCH_TEMPLATE, "lt", {"metadataOptions": IMDS}),
            [],
        ),
        (
            "violating: hop limit 2",
            resource(
                LAUNCH_TEMPLATE, "lt", {"metadataOptions": {**IMDS, "httpPutResponseHopLimit": 2}}
            ),
            ["'lt' lets IMDS answer 2 hop(s) away; above 1, pods read the node role's credentials"],
        ),
        (
            "violating: IMDSv1",
            resource(
                LAUNCH_TEMPLATE, "lt", {"metadataOptions": {**IMDS, "httpTokens": "optional"}}
            ),
            ["'lt' allows IMDSv1 (httpTokens is optional)"],
        ),
        (
            "missing: launch template without metadata options",
            resource(LAUNCH_TEMPLATE, "lt", {}),
            ["allows IMDSv1 (httpTokens is unset)", "lets IMDS answer the default hop(s) away"],
        ),
        (
            "compliant node class",
            resource(NODE_CLASS, "nc", {"spec": {"metadataOptions": IMDS}}),
            [],
        ),
        (
            "violating: node class hop limit 2",
            resource(
                NODE_CLASS,
                "nc",
                {"spec": {"metadataOptions": {**IMDS, "httpPutResponseHopLimit": 2}}},
            ),
            ["'nc' lets IMDS answer 2 hop(s) away"],
        ),
        ("missing: Karpenter's defaults are safe", resource(NODE_CLASS, "nc", {"spec": {}}), []),
    ],
)
def test_imds_keeps_pods_out(violations, case, node, expected):
    found = violations("ec2-imds-pods-kept-out", node)
    assert len(found) == len(expected) and all(
        e in m for e, m in zip(expected, found, strict=True)
    ), (case, found)
