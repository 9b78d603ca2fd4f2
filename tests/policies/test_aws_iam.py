"""IAM policies: no wildcard admin; workload roles confined to their prefix, no version purge."""

from __future__ import annotations

import pytest
from spot_policy_cases import document, resource

ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
MANAGED = "aws:iam/policy:Policy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POD_IDENTITY = "aws:eks/podIdentityAssociation:PodIdentityAssociation"

POD_TRUST = document(
    {
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
    }
)
IRSA_TRUST = document(
    {
        "Effect": "Allow",
        "Principal": {"Federated": "arn:aws:iam::123456789012:oidc-provider/oidc.eks"},
        "Action": "sts:AssumeRoleWithWebIdentity",
    }
)
EC2_TRUST = document(
    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
)
SCOPED = {
    "Sid": "TeamPrefix",
    "Effect": "Allow",
    "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
    "Resource": "arn:aws:s3:::ckpt/teams/vision/*",
}
LIST = {
    "Effect": "Allow",
    "Action": "s3:ListBucket",
    "Resource": "arn:aws:s3:::ckpt",
    "Condition": {"StringLike": {"s3:prefix": ["teams/vision/*"]}},
}
NO_PURGE = {"Effect": "Deny", "Action": "s3:DeleteObjectVersion", "Resource": "*"}


def workload(*statements, trust=POD_TRUST):
    role = resource(ROLE, "vision-training", {"assumeRolePolicy": trust})
    grant = resource(ROLE_POLICY, "vision-ckpt", {"policy": document(*statements)}, deps=(role,))
    return [role, grant]


@pytest.mark.parametrize(
    ("resource_type", "inputs", "violates"),
    [
        (MANAGED, {"policy": document(SCOPED)}, False),
        (MANAGED, {"policy": document({"Effect": "Allow", "Action": "*", "Resource": "*"})}, True),
        (
            ROLE_POLICY,
            {"policy": document({"Effect": "Allow", "Action": ["*"], "Resource": ["*"]})},
            True,
        ),
        (
            ROLE,
            {
                "inlinePolicies": [
                    {
                        "name": "admin",
                        "policy": document({"Effect": "Allow", "Action": "*:*", "Resource": "*"}),
                    }
                ]
            },
            True,
        ),
        (MANAGED, {"policy": document({"Effect": "Deny", "Action": "*", "Resource": "*"})}, False),
        (MANAGED, {}, False),
    ],
    ids=[
        "compliant",
        "violating",
        "violating-role-policy",
        "violating-inline",
        "deny-is-fine",
        "missing",
    ],
)
def test_no_wildcard_admin(violations, resource_type, inputs, violates):
    found = violations("iam-no-wildcard-admin", resource(resource_type, "p", inputs))
    assert bool(found) == violates
    if violates:
        assert "allows Action '*' on Resource '*'" in found[0]


def test_scoped_workload_passes_both_workload_policies(analyzer):
    report = analyzer.analyze(workload(SCOPED, LIST, NO_PURGE))
    assert [v.policy for v in report.violations if v.policy.startswith("iam-workload-")] == []


@pytest.mark.parametrize(
    ("case", "statement", "expected"),
    [
        (
            "violating: whole bucket",
            {**SCOPED, "Resource": "arn:aws:s3:::ckpt/*"},
            "outside a bucket prefix",
        ),
        ("violating: every bucket", {**SCOPED, "Resource": "*"}, "outside a bucket prefix"),
        ("violating: s3:*", {**SCOPED, "Action": "s3:*"}, "every S3 action"),
        (
            "violating: wildcard get",
            {**SCOPED, "Action": "s3:Get*", "Resource": "arn:aws:s3:::*"},
            "outside",
        ),
        ("missing: no Resource", {k: v for k, v in SCOPED.items() if k != "Resource"}, None),
    ],
)
def test_workload_prefix_scoped(violations, case, statement, expected):
    found = violations("iam-workload-prefix-scoped", *workload(statement))
    if expected is None:
        assert found == [], case
    else:
        assert len(found) == 1 and expected in found[0] and "vision-training" in found[0], case


def test_prefix_rule_ignores_roles_not_assumed_by_pods(violations):
    node = resource(ROLE, "node", {"assumeRolePolicy": EC2_TRUST})
    grant = resource(
        ROLE_POLICY, "node-s3", {"policy": document({**SCOPED, "Resource": "*"})}, deps=(node,)
    )
    assert violations("iam-workload-prefix-scoped", node, grant) == []


def test_role_bound_by_pod_identity_association_is_a_workload(violations):
    role = resource(ROLE, "bound", {"assumeRolePolicy": EC2_TRUST})
    grant = resource(
        ROLE_POLICY, "g", {"policy": document({**SCOPED, "Resource": "*"})}, deps=(role,)
    )
    association = resource(POD_IDENTITY, "a", {"roleArn": "arn"}, deps=(role,))
    assert len(violations("iam-workload-prefix-scoped", role, grant, association)) == 1


def test_managed_full_access_attachment_is_caught(violations):
    role = resource(ROLE, "irsa", {"assumeRolePolicy": IRSA_TRUST})
    attached = resource(
        ATTACHMENT,
        "s3-full",
        {"role": "irsa", "policyArn": "arn:aws:iam::aws:policy/AmazonS3FullAccess"},
        deps=(role,),
    )
    assert violations("iam-workload-prefix-scoped", role, attached) == [
        "workload role 'irsa' has arn:aws:iam::aws:policy/AmazonS3FullAccess attached"
    ]
    assert len(violations("iam-workload-no-delete-object-version", role, attached)) == 1


def test_customer_managed_policy_attachment_is_followed(violations):
    role = resource(ROLE, "w", {"assumeRolePolicy": POD_TRUST})
    managed = resource(
        MANAGED, "purge", {"policy": document({**SCOPED, "Action": "s3:DeleteObjectVersion"})}
    )
    attached = resource(ATTACHMENT, "att", {"role": "w", "policyArn": "arn"}, deps=(role, managed))
    assert violations("iam-workload-no-delete-object-version", role, managed, attached) == [
        "workload role 'w' may call s3:DeleteObjectVersion via purge"
    ]


@pytest.mark.parametrize(
    ("case", "statement", "violates"),
    [
        ("compliant", SCOPED, False),
        ("violating: explicit", {**SCOPED, "Action": "s3:DeleteObjectVersion"}, True),
        ("violating: wildcard", {**SCOPED, "Action": "s3:DeleteObject*"}, True),
        ("violating: NotAction", {"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}, True),
        ("missing: no Action", {k: v for k, v in SCOPED.items() if k != "Action"}, False),
    ],
)
def test_workload_no_delete_object_version(violations, case, statement, violates):
    found = violations(
        "iam-workload-no-delete-object-version", *workload(statement, trust=IRSA_TRUST)
    )
    assert bool(found) == violates, case


SCOPED_POD_TRUST = document(
    {
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Condition": {
            "StringEquals": {
                "aws:SourceAccount": "123456789012",
                "aws:RequestTag/eks-cluster-arn": "arn:aws:eks:us-east-1:123456789012:cluster/c",
            }
        },
    }
)


@pytest.mark.parametrize(
    ("case", "inputs", "violates"),
    [
        ("compliant", {"assumeRolePolicy": SCOPED_POD_TRUST}, False),
        ("violating: any account", {"assumeRolePolicy": POD_TRUST}, True),
        ("not a pod role", {"assumeRolePolicy": EC2_TRUST}, False),
        ("missing: no trust", {}, False),
    ],
)
def test_pod_identity_trust_scoped(violations, case, inputs, violates):
    found = violations("iam-pod-identity-trust-scoped", resource(ROLE, "training", inputs))
    assert bool(found) == violates, case
    if violates:
        assert "add an aws:SourceAccount or aws:RequestTag/eks-cluster-arn condition" in found[0]
