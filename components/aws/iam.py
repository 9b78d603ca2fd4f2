"""IAM: the node role, the human roles, one training role per team, and the Pod Identity roles
of the platform's own services.

Least privilege by construction: no statement allows `*` on `*`; a team's training role reaches
only its own checkpoint prefix and can never delete object versions (versioning is the second
line of defence against a bad retention run or a zombie writer).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

AWS_MANAGED = "arn:aws:iam::aws:policy"
# What every node needs from AWS managed policies: join the cluster, run the CNI, pull images.
NODE_POLICIES = {
    "worker": f"{AWS_MANAGED}/AmazonEKSWorkerNodePolicy",
    "cni": f"{AWS_MANAGED}/AmazonEKS_CNI_Policy",
    "ecr": f"{AWS_MANAGED}/AmazonEC2ContainerRegistryPullOnly",
}
EKS_ACCESS_POLICY = "arn:aws:eks::aws:cluster-access-policy"
POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"
# Bucket operations that can destroy checkpoints or their protections: only break-glass has them.
DESTRUCTIVE_BUCKET_ACTIONS = [
    "s3:DeleteObjectVersion",
    "s3:PutBucketVersioning",
    "s3:PutBucketPolicy",
    "s3:DeleteBucketPolicy",
    "s3:PutLifecycleConfiguration",
    "s3:PutEncryptionConfiguration",
    "s3:PutBucketPublicAccessBlock",
    "s3:PutBucketOwnershipControls",
    "s3:DeleteBucket",
]
# What platform-admin needs to read checkpoints and restore an older version of one.
READ_AND_RESTORE_ACTIONS = [
    "s3:ListBucket",
    "s3:ListBucketVersions",
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:GetObjectAttributes",
    "s3:PutObject",
    "s3:GetBucketVersioning",
    "s3:GetBucketPolicy",
    "s3:GetLifecycleConfiguration",
    "s3:GetEncryptionConfiguration",
]


def missing_principals(
    principals: list[tuple[str, str]], account_id: str, provider: pulumi.ProviderResource
) -> list[tuple[str, str]]:
    """(config path, problem) for each principal of the deploying account that IAM does not
    know: a data lookup per role or user (`aws iam get-role` / `get-user`), so that the preview
    stops with the field instead of `pulumi up` failing on "Invalid principal in policy". Those
    of other accounts cannot be looked up from here: docs/deploy.md, section 1, checks them."""
    options = pulumi.InvokeOptions(provider=provider)
    problems = []
    for path, arn in principals:
        account, kind, name = re.fullmatch(
            r"arn:[^:]+:iam::(\d+):(role|user)/(?:.*/)?(.+)", arn
        ).groups()
        if account != account_id:
            continue
        try:
            if kind == "role":
                aws.iam.get_role(name=name, opts=options)
            else:
                aws.iam.get_user(user_name=name, opts=options)
        except Exception as exc:  # noqa: BLE001 - the lookup's own error, shown on one line
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            reason = re.sub(r"^invoke of \S+ failed: ", "", lines[-1])
            problems.append(
                (
                    path,
                    f"no {kind} {name!r} in account {account} ({reason}); IAM refuses a trust "
                    "policy naming it: create it first, or name an existing one",
                )
            )
    return problems


def _trust(principal: dict, condition: dict | None = None) -> dict:
    statement = {
        "Effect": "Allow",
        "Principal": principal,
        "Action": ["sts:AssumeRole", "sts:TagSession"],
    }
    if condition:
        statement["Condition"] = condition
    return {"Version": "2012-10-17", "Statement": [statement]}


def pod_identity_trust(
    cluster_arn: pulumi.Input[str], namespace: str, service_account: str
) -> pulumi.Output[str]:
    """Trust for EKS Pod Identity from this account and cluster only, and only for one service
    account (the session tags Pod Identity sends): a second association elsewhere can never hand
    the role to other pods."""
    return pulumi.Output.from_input(cluster_arn).apply(
        lambda arn: json.dumps(
            _trust(
                {"Service": POD_IDENTITY_SERVICE},
                {
                    "StringEquals": {
                        "aws:SourceAccount": arn.split(":")[4],
                        "aws:RequestTag/eks-cluster-arn": arn,
                        "aws:RequestTag/kubernetes-namespace": namespace,
                        "aws:RequestTag/kubernetes-service-account": service_account,
                    }
                },
            )
        )
    )


def node_agent_policy(cluster_name: str) -> dict:
    """What the node agents need beyond the managed policies: Session Manager access (no
    parameter reads) and the Container Insights agent, writing only this cluster's log groups."""
    insights = f"arn:aws:logs:*:*:log-group:/aws/containerinsights/{cluster_name}/*"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "SessionManager",
                "Effect": "Allow",
                "Action": [
                    "ssm:UpdateInstanceInformation",
                    "ssmmessages:CreateControlChannel",
                    "ssmmessages:CreateDataChannel",
                    "ssmmessages:OpenControlChannel",
                    "ssmmessages:OpenDataChannel",
                    "ec2messages:AcknowledgeMessage",
                    "ec2messages:DeleteMessage",
                    "ec2messages:FailMessage",
                    "ec2messages:GetEndpoint",
                    "ec2messages:GetMessages",
                    "ec2messages:SendReply",
                ],
                "Resource": "*",
            },
            {
                "Sid": "ContainerInsightsMetrics",
                "Effect": "Allow",
                "Action": [
                    "cloudwatch:PutMetricData",
                    "ec2:DescribeInstances",
                    "ec2:DescribeTags",
                    "ec2:DescribeVolumes",
                ],
                "Resource": "*",
            },
            {
                "Sid": "ContainerInsightsLogs",
                "Effect": "Allow",
                "Action": [
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:DescribeLogStreams",
                    "logs:PutLogEvents",
                ],
                "Resource": [insights, f"{insights}:*"],
            },
        ],
    }


@dataclass(frozen=True)
class NodeRoleArgs:
    cluster_name: pulumi.Input[str]
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
            assume_role_policy=json.dumps(_trust({"Service": "ec2.amazonaws.com"})),
            tags=args.tags,
            opts=child,
        )
        for suffix, policy_arn in NODE_POLICIES.items():
            aws.iam.RolePolicyAttachment(
                f"{name}-{suffix}", role=role.name, policy_arn=policy_arn, opts=child
            )
        aws.iam.RolePolicy(
            f"{name}-agents",
            role=role.id,
            policy=pulumi.Output.from_input(args.cluster_name).apply(
                lambda cluster: json.dumps(node_agent_policy(cluster))
            ),
            opts=child,
        )
        self.arn, self.name = role.arn, role.name
        self.register_outputs({"arn": self.arn, "name": self.name})


@dataclass(frozen=True)
class TeamEngineers:
    """Who may assume a team's ml-engineer role, and the namespace it edits."""

    team: str
    namespace: str
    principals: tuple[str, ...]


@dataclass(frozen=True)
class PlatformRolesArgs:
    # The cluster's output, not its configured name: the access entries wait for the cluster.
    cluster_name: pulumi.Input[str]
    cluster_arn: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    checkpoint_key_arn: pulumi.Input[str]
    team_namespaces: list[str]
    platform_admin: list[str]
    break_glass: list[str]
    engineers: tuple[TeamEngineers, ...] = ()
    log_reader: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for attr in ("platform_admin", "break_glass"):
            if not getattr(self, attr):
                raise ValueError(f"PlatformRolesArgs.{attr}: at least one principal")
        outside = [e.namespace for e in self.engineers if e.namespace not in self.team_namespaces]
        if outside:
            raise ValueError(f"PlatformRolesArgs.engineers: namespaces {outside} are no team's")


class PlatformRoles(pulumi.ComponentResource):
    """platform-admin operates the platform and can read and restore checkpoints, never destroy
    them; break-glass (MFA) holds the destructive bucket operations; one ml-engineer role per
    team edits that team's namespace only; log-reader only reads logs. Each role that reaches the
    cluster does so through an EKS access entry scoped to what it may touch."""

    arns: dict[str, pulumi.Output[str]]

    def __init__(
        self, name: str, args: PlatformRolesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:iam:PlatformRoles", name, None, opts)
        self._name, self._args = name, args
        # Control-plane and Container Insights log groups of this cluster only.
        logs = pulumi.Output.concat("arn:aws:logs:*:*:log-group:/aws/*/", args.cluster_name, "/*")
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
            "Resource": [logs, pulumi.Output.concat(logs, ":*")],
        }
        describe_cluster = {
            "Sid": "DescribeCluster",
            "Effect": "Allow",
            "Action": ["eks:DescribeCluster", "eks:AccessKubernetesApi"],
            "Resource": args.cluster_arn,
        }
        bucket_objects = [args.bucket_arn, pulumi.Output.concat(args.bucket_arn, "/*")]
        self.arns = {}
        self._role(
            "platform-admin",
            args.platform_admin,
            [
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
                # The cloud drill (spotctl drill --cloud-run, docs/operations.md): find the
                # stack's experiment template, start it, read the experiment (FIS's actions,
                # resources in the Service Authorization Reference).
                {
                    "Sid": "FindDrillTemplates",
                    "Effect": "Allow",
                    "Action": "fis:ListExperimentTemplates",
                    "Resource": "*",
                },
                {
                    "Sid": "RunSpotDrill",
                    "Effect": "Allow",
                    "Action": ["fis:StartExperiment", "fis:GetExperiment"],
                    "Resource": [
                        "arn:aws:fis:*:*:experiment-template/*",
                        "arn:aws:fis:*:*:experiment/*",
                    ],
                },
                {
                    "Sid": "ReadAndRestoreCheckpoints",
                    "Effect": "Allow",
                    "Action": READ_AND_RESTORE_ACTIONS,
                    "Resource": bucket_objects,
                },
                {
                    "Sid": "UseCheckpointKey",
                    "Effect": "Allow",
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                    "Resource": args.checkpoint_key_arn,
                },
                # Even if a broader grant is attached later: these stay with break-glass.
                {
                    "Sid": "NeverDestroyCheckpoints",
                    "Effect": "Deny",
                    "Action": DESTRUCTIVE_BUCKET_ACTIONS,
                    "Resource": bucket_objects,
                },
                read_logs,
            ],
            access=("AmazonEKSClusterAdminPolicy", None),
        )
        self._role(
            "break-glass",
            args.break_glass,
            [
                {
                    "Sid": "ChangeCheckpointProtection",
                    "Effect": "Allow",
                    "Action": DESTRUCTIVE_BUCKET_ACTIONS + READ_AND_RESTORE_ACTIONS,
                    "Resource": bucket_objects,
                },
                {
                    "Sid": "UseCheckpointKey",
                    "Effect": "Allow",
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                    "Resource": args.checkpoint_key_arn,
                },
            ],
            mfa=True,
        )
        for team in args.engineers:
            self._role(
                f"ml-engineer-{team.team}",
                list(team.principals),
                [describe_cluster, read_logs],
                access=("AmazonEKSEditPolicy", [team.namespace]),
            )
        self._role(
            "log-reader",
            args.log_reader,
            [read_logs],
            access=("AmazonEKSViewPolicy", args.team_namespaces),
        )
        self.register_outputs(dict(self.arns))

    def _role(
        self,
        role_name: str,
        principals: list[str],
        statements: list[dict],
        access: tuple[str, list[str] | None] | None = None,
        mfa: bool = False,
    ) -> None:
        """One role: its trust, its policy and, given `access` (EKS access policy, namespaces or
        None for the whole cluster), its access entry. No principals, no role."""
        if not principals:
            return
        name, args = f"{self._name}-{role_name}", self._args
        child = pulumi.ResourceOptions(parent=self)
        condition = {"Bool": {"aws:MultiFactorAuthPresent": "true"}} if mfa else None
        role = aws.iam.Role(
            name,
            assume_role_policy=json.dumps(_trust({"AWS": sorted(principals)}, condition)),
            max_session_duration=3600,
            tags=args.tags,
            opts=child,
        )
        aws.iam.RolePolicy(
            name,
            role=role.id,
            policy=pulumi.Output.json_dumps({"Version": "2012-10-17", "Statement": statements}),
            opts=child,
        )
        self.arns[role_name] = role.arn
        if access is None:
            return
        policy, namespaces = access
        entry = aws.eks.AccessEntry(
            name,
            cluster_name=args.cluster_name,
            principal_arn=role.arn,
            tags=args.tags,
            opts=child,
        )
        aws.eks.AccessPolicyAssociation(
            name,
            cluster_name=args.cluster_name,
            principal_arn=entry.principal_arn,
            policy_arn=f"{EKS_ACCESS_POLICY}/{policy}",
            access_scope=(
                {"type": "cluster"}
                if namespaces is None
                else {"type": "namespace", "namespaces": namespaces}
            ),
            opts=child,
        )


@dataclass(frozen=True)
class PodIdentity:
    """A Kubernetes service account of a cluster, to bind an IAM role to."""

    cluster_name: pulumi.Input[str]
    cluster_arn: pulumi.Input[str]
    namespace: str
    service_account: str


def pod_identity_role(
    name: str,
    identity: PodIdentity,
    policy: pulumi.Input[str],
    tags: dict[str, str],
    parent: pulumi.Resource,
) -> aws.iam.Role:
    """A role for one service account: its trust (`pod_identity_trust`), its inline policy and
    the Pod Identity association that hands it to the account's pods."""
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(
        name,
        assume_role_policy=pod_identity_trust(
            identity.cluster_arn, identity.namespace, identity.service_account
        ),
        tags=tags,
        opts=child,
    )
    aws.iam.RolePolicy(f"{name}-policy", role=role.id, policy=policy, opts=child)
    aws.eks.PodIdentityAssociation(
        f"{name}-pod-identity",
        cluster_name=identity.cluster_name,
        namespace=identity.namespace,
        service_account=identity.service_account,
        role_arn=role.arn,
        tags=tags,
        opts=child,
    )
    return role


@dataclass(frozen=True)
class TeamTrainingRoleArgs:
    team: str
    cluster_name: pulumi.Input[str]
    cluster_arn: pulumi.Input[str]
    namespace: str
    service_account: str
    bucket_arn: pulumi.Input[str]
    prefix: str
    kms_key_arn: pulumi.Input[str]
    region: str
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
        role = pod_identity_role(
            name,
            PodIdentity(args.cluster_name, args.cluster_arn, args.namespace, args.service_account),
            policy=pulumi.Output.json_dumps(
                checkpoint_policy(args.bucket_arn, args.prefix, args.kms_key_arn, args.region)
            ),
            tags=args.tags,
            parent=self,
        )
        self.arn = role.arn
        self.register_outputs({"arn": self.arn})


def checkpoint_policy(
    bucket_arn: pulumi.Input[str], prefix: str, kms_key_arn: pulumi.Input[str], region: str
) -> pulumi.Output[dict]:
    """Read/write under `<bucket>/<prefix>/*` only; never delete an object version; the bucket
    key decrypts only this prefix's objects (S3 names the object in the encryption context)."""
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
                    # `<prefix>/` and below only: the bare prefix would also list siblings such
                    # as `<prefix>-other/`.
                    "Sid": "ListTeamPrefix",
                    "Effect": "Allow",
                    "Action": "s3:ListBucket",
                    "Resource": arns[0],
                    "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
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
                    "Condition": {
                        "StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"},
                        "StringLike": {"kms:EncryptionContext:aws:s3:arn": f"{arns[0]}/{prefix}/*"},
                    },
                },
            ],
        }
    )
