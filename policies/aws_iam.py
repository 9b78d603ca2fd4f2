"""IAM on AWS: no administrator wildcards anywhere, and training workloads confined to their own
team's checkpoint prefix without the power to destroy object versions."""

from __future__ import annotations

import re
from collections.abc import Mapping
from fnmatch import fnmatchcase

from pulumi_policy import PolicyResource

from policies.inputs import as_list, dig, of_type, policy_document, refers_to, statements
from policies.rule import MANDATORY, ResourceRule, StackRule

ROLE = "aws:iam/role:Role"
MANAGED_POLICY = "aws:iam/policy:Policy"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
POD_IDENTITY = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
DOCUMENT_PROPS = {
    MANAGED_POLICY: "policy",
    ROLE_POLICY: "policy",
    "aws:iam/userPolicy:UserPolicy": "policy",
    "aws:iam/groupPolicy:GroupPolicy": "policy",
}
# AWS-managed policies whose grants are known to cover every S3 action.
S3_ADMIN_MANAGED = ("AdministratorAccess", "PowerUserAccess", "AmazonS3FullAccess")
OBJECT_ACTIONS = (
    "s3:getobject",
    "s3:putobject",
    "s3:deleteobject",
    "s3:getobjectversion",
    "s3:deleteobjectversion",
    "s3:abortmultipartupload",
    "s3:listmultipartuploadparts",
)
# arn:aws:s3:::<bucket>/<prefix>/...: at least one literal path segment before any wildcard.
PREFIX_SCOPED = re.compile(r"^arn:[^:]+:s3:::[^/*]+/[^/*]+/")


def _documents(resource_type: str, props: Mapping) -> list:
    if resource_type == ROLE:
        return [dig(p, "policy") for p in as_list(props.get("inlinePolicies"))]
    prop = DOCUMENT_PROPS.get(resource_type)
    return [props.get(prop)] if prop else []


def _allows(statement: Mapping) -> bool:
    return statement.get("Effect") == "Allow"


def _grants(statement: Mapping, action: str) -> bool:
    """Whether an Allow statement's actions cover `action` (IAM actions are case-insensitive)."""
    if not _allows(statement):
        return False
    if "NotAction" in statement:
        return not any(fnmatchcase(action, a.lower()) for a in as_list(statement["NotAction"]))
    return any(fnmatchcase(action, a.lower()) for a in as_list(statement.get("Action")))


def _check_no_wildcard_admin(args, report_violation, _settings) -> None:
    for document in _documents(args.resource_type, args.props):
        for statement in statements(document):
            actions = as_list(statement.get("Action"))
            if (
                _allows(statement)
                and any(a in ("*", "*:*") for a in actions)
                and "*" in as_list(statement.get("Resource"))
            ):
                report_violation(
                    f"'{args.name}' allows Action '*' on Resource '*' "
                    f"(statement {statement.get('Sid', '<no Sid>')})"
                )


def _is_workload_role(role: PolicyResource, resources: list[PolicyResource]) -> bool:
    """Assumed by pods: EKS Pod Identity, IRSA (web identity federation), or bound to a service
    account through a PodIdentityAssociation."""
    for statement in statements(role.props.get("assumeRolePolicy")):
        services = as_list(dig(statement, "Principal", "Service"))
        actions = [a.lower() for a in as_list(statement.get("Action"))]
        if "pods.eks.amazonaws.com" in services or "sts:assumerolewithwebidentity" in actions:
            return True
    return any(refers_to(a, "roleArn", role) for a in of_type(resources, POD_IDENTITY))


def _workload_grants(args):
    """(role, where, statement) for every statement that reaches a workload role, and
    (role, where, None) for attached AWS-managed policies that cannot be read here."""
    managed = of_type(args.resources, MANAGED_POLICY)
    for role in of_type(args.resources, ROLE):
        if not _is_workload_role(role, args.resources):
            continue
        sources = [(f"inline policy of {role.name}", d) for d in _documents(ROLE, role.props)]
        sources += [
            (p.name, p.props.get("policy"))
            for p in of_type(args.resources, ROLE_POLICY)
            if refers_to(p, "role", role)
        ]
        for attachment in of_type(args.resources, ATTACHMENT):
            if not refers_to(attachment, "role", role):
                continue
            arn = attachment.props.get("policyArn")
            if isinstance(arn, str) and arn.split("/")[-1] in S3_ADMIN_MANAGED:
                yield role, arn, None
            sources += [
                (p.name, p.props.get("policy"))
                for p in managed
                if refers_to(attachment, "policyArn", p)
            ]
        for where, document in sources:
            for statement in statements(policy_document(document)):
                yield role, where, statement


def _check_prefix_scoped(args, report_violation, _settings) -> None:
    for role, where, statement in _workload_grants(args):
        if statement is None:
            report_violation(f"workload role '{role.name}' has {where} attached", role.urn)
            continue
        if not _allows(statement):
            continue
        if "NotAction" in statement or any(
            a.lower() in ("*", "s3:*") for a in as_list(statement.get("Action"))
        ):
            report_violation(
                f"workload role '{role.name}' is granted every S3 action by {where}", role.urn
            )
            continue
        if not any(_grants(statement, action) for action in OBJECT_ACTIONS):
            continue
        loose = [r for r in as_list(statement.get("Resource")) if not PREFIX_SCOPED.match(str(r))]
        if loose:
            report_violation(
                f"workload role '{role.name}' may touch objects outside a bucket prefix via "
                f"{where}: {', '.join(map(str, loose))}",
                role.urn,
            )


def _check_no_delete_version(args, report_violation, _settings) -> None:
    for role, where, statement in _workload_grants(args):
        if statement is None or _grants(statement, "s3:deleteobjectversion"):
            report_violation(
                f"workload role '{role.name}' may call s3:DeleteObjectVersion via {where}", role.urn
            )


# Condition keys that tie a Pod Identity trust to an account or a cluster.
POD_IDENTITY_SCOPE_KEYS = ("aws:sourceaccount", "aws:sourcearn", "aws:requesttag/eks-cluster-arn")


def _check_pod_trust_scoped(args, report_violation, _settings) -> None:
    if args.resource_type != ROLE:
        return
    for statement in statements(args.props.get("assumeRolePolicy")):
        if not _allows(statement):
            continue
        if "pods.eks.amazonaws.com" not in as_list(dig(statement, "Principal", "Service")):
            continue
        keys = {key.lower() for test in (statement.get("Condition") or {}).values() for key in test}
        if not keys & set(POD_IDENTITY_SCOPE_KEYS):
            report_violation(
                f"'{args.name}' trusts EKS Pod Identity from any account and cluster: add an "
                "aws:SourceAccount or aws:RequestTag/eks-cluster-arn condition"
            )


POLICIES = [
    ResourceRule(
        "iam-no-wildcard-admin",
        "No IAM policy allows Action '*' on Resource '*'.",
        "A wildcard grant makes every other IAM rule meaningless.",
        _check_no_wildcard_admin,
        MANDATORY,
        fix=(
            "Replace the Action '*' on Resource '*' statement with the actions and resources the "
            "role needs; administrators get AWS's managed AdministratorAccess through an SSO "
            "permission set, not a stack policy."
        ),
    ),
    StackRule(
        "iam-workload-prefix-scoped",
        "Roles assumed by pods (Pod Identity or IRSA) reach S3 objects only under a bucket "
        "prefix (arn:aws:s3:::<bucket>/<prefix>/...) and never with s3:* or *.",
        "A training job must not be able to read or overwrite another team's checkpoints.",
        _check_prefix_scoped,
        MANDATORY,
        fix=(
            "Scope the pod role's object statements to arn:aws:s3:::<bucket>/<team prefix>/* with "
            "named actions (s3:GetObject, s3:PutObject, ...); the team's prefix is "
            "teams[].checkpoint_prefix in the stack config."
        ),
    ),
    StackRule(
        "iam-workload-no-delete-object-version",
        "Roles assumed by pods are never allowed s3:DeleteObjectVersion.",
        "Bucket versioning only protects checkpoints if the writer cannot purge old versions; "
        "a zombie or buggy job must never destroy history.",
        _check_no_delete_version,
        MANDATORY,
        fix=(
            "Remove s3:DeleteObjectVersion (and any action wildcard that matches it) from the pod "
            "role's policies; old versions expire through the bucket's lifecycle."
        ),
    ),
    ResourceRule(
        "iam-pod-identity-trust-scoped",
        "Roles trusted by EKS Pod Identity (pods.eks.amazonaws.com) name the account or cluster "
        "they trust (aws:SourceAccount, aws:SourceArn or aws:RequestTag/eks-cluster-arn).",
        "Without it any cluster's Pod Identity agent that is handed the role can assume it (the "
        "confused deputy).",
        _check_pod_trust_scoped,
        fix=(
            "Add a condition to the trust statement: StringEquals aws:SourceAccount with the "
            "account id, or ArnEquals aws:SourceArn with the cluster's ARN."
        ),
    ),
]
