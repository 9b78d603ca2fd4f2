"""IAM: the node role, the three human roles, and one training role per team.

Least privilege by construction: no statement allows `*` on `*`; a team's training role reaches
only its own checkpoint prefix and can never delete object versions (versioning is the second
line of defence against a bad retention run or a zombie writer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

AWS_MANAGED = "arn:aws:iam::aws:policy"
NODE_POLICIES = {
    "worker": f"{AWS_MANAGED}/AmazonEKSWorkerNodePolicy",
    "cni": f"{AWS_MANAGED}/AmazonEKS_CNI_Policy",
    "ecr": f"{AWS_MANAGED}/AmazonEC2ContainerRegistryPullOnly",
    "ssm": f"{AWS_MANAGED}/AmazonSSMManagedInstanceCore",
    "cloudwatch": f"{AWS_MANAGED}/CloudWatchAgentServerPolicy",
}
EKS_ACCESS_POLICY = "arn:aws:eks::aws:cluster-access-policy"
# Human role -> (EKS access policy, scope). ml-engineer edits only the team namespaces.
ROLE_CLUSTER_ACCESS = {
    "platform-admin": ("AmazonEKSClusterAdminPolicy", "cluster"),
    "ml-engineer": ("AmazonEKSEditPolicy", "namespace"),
    "log-reader": ("AmazonEKSViewPolicy", "namespace"),
}


def trust_policy(principal: dict) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": principal,
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                }
            ],
        }
    )


@dataclass(frozen=True)
class NodeRoleArgs:
    tags: dict[str, str] = field(default_factory=dict)


class NodeRole(pulumi.ComponentResource):
    """The EC2 instance role of every node group: join the cluster, pull images, ship metrics."""

    arn: pulumi.Output[str]
    name: pulumi.Output[str]

    def __init__(
        self, name: str, args: NodeRoleArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:iam:NodeRole", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            name,
            assume_role_policy=trust_policy({"Service": "ec2.amazonaws.com"}),
            tags=args.tags,
            opts=child,
        )
        for suffix, policy_arn in NODE_POLICIES.items():
            aws.iam.RolePolicyAttachment(
                f"{name}-{suffix}", role=role.name, policy_arn=policy_arn, opts=child
            )
        self.arn, self.name = role.arn, role.name
        self.register_outputs({"arn": self.arn, "name": self.name})


@dataclass(frozen=True)
class PlatformRolesArgs:
    cluster_name: str
    cluster_arn: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    team_namespaces: list[str]
    platform_admin: list[str]
    ml_engineer: list[str] = field(default_factory=list)
    log_reader: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.platform_admin:
            raise ValueError("PlatformRolesArgs.platform_admin: at least one principal")


class PlatformRoles(pulumi.ComponentResource):
    """platform-admin changes configuration; ml-engineer submits jobs and reads logs;
    log-reader only reads logs. Each is an IAM role plus its Kubernetes access entry."""

    arns: dict[str, pulumi.Output[str]]

    def __init__(
        self, name: str, args: PlatformRolesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:iam:PlatformRoles", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Control-plane and Container Insights log groups of this cluster only.
        logs = f"arn:aws:logs:*:*:log-group:/aws/*/{args.cluster_name}/*"
        read_logs = {
            "Sid": "ReadClusterLogs",
            "Effect": "Allow",
            "Action": [
                "logs:DescribeLogStreams",
                "logs:GetLogEvents",
                "logs:FilterLogEvents",
                "logs:StartQuery",
                "logs:GetQueryResults",
            ],
            "Resource": [logs, f"{logs}:*"],
        }
        describe_cluster = {
            "Sid": "DescribeCluster",
            "Effect": "Allow",
            "Action": ["eks:DescribeCluster", "eks:AccessKubernetesApi"],
            "Resource": args.cluster_arn,
        }
        statements = {
            "platform-admin": [
                {
                    "Sid": "OperatePlatform",
                    "Effect": "Allow",
                    "Action": [
                        "eks:*",
                        "autoscaling:*",
                        "cloudwatch:*",
                        "events:*",
                        "sqs:*",
                        "sns:*",
                        "servicequotas:*",
                        "kms:Describe*",
                        "kms:Get*",
                        "kms:List*",
                        "kms:EnableKeyRotation",
                    ],
                    "Resource": "*",
                },
                {
                    "Sid": "ManageCheckpointBucket",
                    "Effect": "Allow",
                    "Action": "s3:*",
                    "Resource": [args.bucket_arn, pulumi.Output.concat(args.bucket_arn, "/*")],
                },
                read_logs,
            ],
            "ml-engineer": [describe_cluster, read_logs],
            "log-reader": [read_logs],
        }
        principals = {
            "platform-admin": args.platform_admin,
            "ml-engineer": args.ml_engineer,
            "log-reader": args.log_reader,
        }
        self.arns = {}
        for role_name, allowed in principals.items():
            if not allowed:
                continue
            role = aws.iam.Role(
                f"{name}-{role_name}",
                assume_role_policy=trust_policy({"AWS": sorted(allowed)}),
                max_session_duration=3600,
                tags=args.tags,
                opts=child,
            )
            aws.iam.RolePolicy(
                f"{name}-{role_name}",
                role=role.id,
                policy=pulumi.Output.json_dumps(
                    {"Version": "2012-10-17", "Statement": statements[role_name]}
                ),
                opts=child,
            )
            policy, scope = ROLE_CLUSTER_ACCESS[role_name]
            entry = aws.eks.AccessEntry(
                f"{name}-{role_name}",
                cluster_name=args.cluster_name,
                principal_arn=role.arn,
                tags=args.tags,
                opts=child,
            )
            access_scope = (
                {"type": "cluster"}
                if scope == "cluster"
                else {"type": "namespace", "namespaces": args.team_namespaces}
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-{role_name}",
                cluster_name=args.cluster_name,
                principal_arn=entry.principal_arn,
                policy_arn=f"{EKS_ACCESS_POLICY}/{policy}",
                access_scope=access_scope,
                opts=child,
            )
            self.arns[role_name] = role.arn
        self.register_outputs(dict(self.arns))


@dataclass(frozen=True)
class TeamTrainingRoleArgs:
    team: str
    cluster_name: pulumi.Input[str]
    namespace: str
    service_account: str
    bucket_arn: pulumi.Input[str]
    prefix: str
    kms_key_arn: pulumi.Input[str]
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.prefix or "*" in self.prefix or self.prefix.startswith("/"):
            raise ValueError(
                f"TeamTrainingRoleArgs.prefix: {self.prefix!r} must be a non-empty key prefix "
                "without wildcards or a leading slash"
            )


class TeamTrainingRole(pulumi.ComponentResource):
    """The identity of one team's training pods, bound through EKS Pod Identity."""

    arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: TeamTrainingRoleArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:iam:TeamTrainingRole", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            name,
            assume_role_policy=trust_policy({"Service": "pods.eks.amazonaws.com"}),
            tags=args.tags,
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-checkpoints",
            role=role.id,
            policy=pulumi.Output.json_dumps(
                checkpoint_policy(args.bucket_arn, args.prefix, args.kms_key_arn)
            ),
            opts=child,
        )
        aws.eks.PodIdentityAssociation(
            f"{name}-pod-identity",
            cluster_name=args.cluster_name,
            namespace=args.namespace,
            service_account=args.service_account,
            role_arn=role.arn,
            tags=args.tags,
            opts=child,
        )
        self.arn = role.arn
        self.register_outputs({"arn": self.arn})


def checkpoint_policy(
    bucket_arn: pulumi.Input[str], prefix: str, kms_key_arn: pulumi.Input[str]
) -> pulumi.Output[dict]:
    """Read/write under `<bucket>/<prefix>/*` only; never delete an object version."""
    return pulumi.Output.all(bucket_arn, kms_key_arn).apply(
        lambda arns: {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "TeamCheckpoints",
                    "Effect": "Allow",
                    "Action": [
                        "s3:GetObject",
                        "s3:PutObject",
                        "s3:DeleteObject",
                        "s3:AbortMultipartUpload",
                        "s3:ListMultipartUploadParts",
                    ],
                    "Resource": f"{arns[0]}/{prefix}/*",
                },
                {
                    "Sid": "ListTeamPrefix",
                    "Effect": "Allow",
                    "Action": "s3:ListBucket",
                    "Resource": arns[0],
                    "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*", prefix]}},
                },
                {
                    "Sid": "NeverDeleteVersions",
                    "Effect": "Deny",
                    "Action": "s3:DeleteObjectVersion",
                    "Resource": f"{arns[0]}/*",
                },
                {
                    "Sid": "UseCheckpointKey",
                    "Effect": "Allow",
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                    "Resource": arns[1],
                },
            ],
        }
    )
