"""IAM on GCP: the node service account, the platform's groups, and one training identity per
team through Workload Identity Federation for GKE.

No service-account keys anywhere: nodes run as their own account, pods get short-lived tokens
for their team's account from the GKE metadata server. A team's account reaches only objects
under its own prefix, by an IAM condition on the object name.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

# What GKE nodes need (logs, metrics, autoscaler signals) plus pulling images.
NODE_ROLES = ("roles/container.defaultNodeServiceAccount", "roles/artifactregistry.reader")
# With image streaming, GKE asks a node account other than the default for this role in the
# image's project (GKE's image streaming requirements).
IMAGE_STREAMING_ROLE = "roles/serviceusage.serviceUsageConsumer"
# Project roles of each platform group. ml-engineer and log-reader get cluster credentials only
# (container.clusterViewer); what they may do inside is RBAC in the team namespaces.
GROUP_ROLES = {
    "platform-admin": (
        "roles/container.admin",
        "roles/monitoring.editor",
        "roles/logging.viewer",
        "roles/cloudquotas.admin",
        "roles/cloudkms.viewer",
    ),
    "ml-engineer": (
        "roles/container.clusterViewer",
        "roles/logging.viewer",
        "roles/monitoring.viewer",
    ),
    "log-reader": ("roles/container.clusterViewer", "roles/logging.viewer"),
}
# What platform-admin runs beyond its predefined roles, each permission a documented command needs
# (Compute Engine and Cloud Scheduler API references, "IAM permissions" of each method): the cloud
# drill (docs/operations.md: list the class's VMs, simulate a maintenance event, wait for its
# zone operation) and the quota follow-up (docs/deploy-gcp.md: `compute project-info describe`,
# `compute regions describe`). No predefined role holds these without far more.
OPERATOR_PERMISSIONS = (
    "compute.instances.list",
    "compute.instances.simulateMaintenanceEvent",
    "compute.zoneOperations.get",
    "compute.projects.get",
    "compute.regions.get",
)
# With a buffer pool: docs/deploy-gcp.md's `gcloud scheduler jobs list / describe / run / pause`.
BUFFER_OPERATOR_PERMISSIONS = (
    "cloudscheduler.jobs.list",
    "cloudscheduler.jobs.get",
    "cloudscheduler.jobs.run",
    "cloudscheduler.jobs.pause",
)
# Checkpoint objects: read, write, list, delete what the runtime wrote, multipart uploads.
# Nothing on the bucket, its IAM, or soft-deleted objects.
CHECKPOINT_PERMISSIONS = (
    "storage.objects.create",
    "storage.objects.get",
    "storage.objects.list",
    "storage.objects.delete",
    "storage.multipartUploads.create",
    "storage.multipartUploads.abort",
    "storage.multipartUploads.list",
    "storage.multipartUploads.listParts",
)
ACCOUNT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")


def account_id(*parts: str) -> str:
    """A service account id from name parts; ids over 30 characters keep a hash of the rest."""
    whole = "-".join(parts)
    if len(whole) <= 30:
        return whole
    return f"{whole[:21].rstrip('-')}-{hashlib.sha256(whole.encode()).hexdigest()[:8]}"


def check_account_id(value: str, what: str) -> str:
    if not ACCOUNT_ID.match(value):
        raise ValueError(
            f"{what}: {value!r} is not a service account id (6-30 characters: lowercase "
            "letters, digits and '-', starting with a letter)"
        )
    return value


def check_role_id(value: str, what: str) -> str:
    if not re.fullmatch(r"[a-zA-Z0-9_.]{3,64}", value):
        raise ValueError(f"{what}: {value!r} must be 3-64 letters, digits, '_' or '.'")
    return value


def custom_role(
    name: str,
    project: str,
    role_id: str,
    title: str,
    description: str,
    permissions: tuple[str, ...],
    opts: pulumi.ResourceOptions,
) -> gcp.projects.IAMCustomRole:
    """A project's custom role (GA) with exactly these permissions."""
    return gcp.projects.IAMCustomRole(
        name,
        project=project,
        role_id=role_id,
        title=title,
        description=description,
        permissions=list(permissions),
        stage="GA",
        opts=opts,
    )


def role_id(title: str, env: str) -> str:
    """A custom role's id, per environment: `spotTraining<Title>_<env>`."""
    return f"spotTraining{title}_{env.replace('-', '_')}"


@dataclass(frozen=True)
class NodeServiceAccountArgs:
    project: str
    account_id: str
    image_streaming: bool = False

    @property
    def roles(self) -> tuple[str, ...]:
        return (*NODE_ROLES, *([IMAGE_STREAMING_ROLE] if self.image_streaming else []))

    def __post_init__(self) -> None:
        check_account_id(self.account_id, "NodeServiceAccountArgs.account_id")


class NodeServiceAccount(pulumi.ComponentResource):
    """The account every GKE node runs as, instead of the Compute Engine default (an editor)."""

    email: pulumi.Output[str]

    def __init__(
        self, name: str, args: NodeServiceAccountArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:NodeServiceAccount", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = gcp.serviceaccount.Account(
            f"{name}-account",
            project=args.project,
            account_id=args.account_id,
            display_name="GKE nodes of the spot training platform",
            opts=child,
        )
        for role in args.roles:
            gcp.projects.IAMMember(
                f"{name}-{_short(role)}",
                project=args.project,
                role=role,
                member=account.member,
                opts=child,
            )
        self.email = account.email
        self.register_outputs({"email": self.email})


@dataclass(frozen=True)
class PlatformGroupsArgs:
    project: str
    bucket: pulumi.Input[str]
    platform_admin: list[str]
    # The custom role of what platform-admin runs beyond its predefined roles.
    operator_role_id: str
    operator_permissions: tuple[str, ...] = OPERATOR_PERMISSIONS
    ml_engineer: list[str] = field(default_factory=list)
    log_reader: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.platform_admin:
            raise ValueError("PlatformGroupsArgs.platform_admin: at least one member")
        check_role_id(self.operator_role_id, "PlatformGroupsArgs.operator_role_id")


class PlatformGroups(pulumi.ComponentResource):
    """platform-admin changes configuration; ml-engineer submits jobs and reads logs;
    log-reader only reads logs."""

    def __init__(
        self, name: str, args: PlatformGroupsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:PlatformGroups", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        members = {
            "platform-admin": args.platform_admin,
            "ml-engineer": args.ml_engineer,
            "log-reader": args.log_reader,
        }
        for group, group_members in members.items():
            for index, member in enumerate(group_members):
                for role in GROUP_ROLES[group]:
                    gcp.projects.IAMMember(
                        f"{name}-{group}-{index}-{_short(role)}",
                        project=args.project,
                        role=role,
                        member=member,
                        opts=child,
                    )
        operator = custom_role(
            f"{name}-operator",
            args.project,
            args.operator_role_id,
            "Spot training operator",
            "The cloud drill, quota follow-up and buffer schedule of the runbooks.",
            args.operator_permissions,
            child,
        )
        for index, member in enumerate(args.platform_admin):
            gcp.projects.IAMMember(
                f"{name}-platform-admin-{index}-operator",
                project=args.project,
                role=operator.name,
                member=member,
                opts=child,
            )
            gcp.storage.BucketIAMMember(
                f"{name}-platform-admin-{index}-checkpoints",
                bucket=args.bucket,
                role="roles/storage.admin",
                member=member,
                opts=child,
            )
        self.register_outputs({})


@dataclass(frozen=True)
class CheckpointWriterRoleArgs:
    project: str
    role_id: str

    def __post_init__(self) -> None:
        check_role_id(self.role_id, "CheckpointWriterRoleArgs.role_id")


class CheckpointWriterRole(pulumi.ComponentResource):
    """A custom role with only what the runtime does to checkpoint objects."""

    id: pulumi.Output[str]

    def __init__(
        self, name: str, args: CheckpointWriterRoleArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:CheckpointWriterRole", name, None, opts)
        role = custom_role(
            f"{name}-role",
            args.project,
            args.role_id,
            "Spot training checkpoint writer",
            "Read, write, list and delete checkpoint objects; nothing on the bucket.",
            CHECKPOINT_PERMISSIONS,
            pulumi.ResourceOptions(parent=self),
        )
        self.id = role.name
        self.register_outputs({"id": self.id})


@dataclass(frozen=True)
class TeamTrainingIdentityArgs:
    project: str
    account_id: str
    # The cluster's output, so the binding waits for the cluster that creates the pool.
    workload_pool: pulumi.Input[str]
    namespace: str
    service_account: str
    bucket: pulumi.Input[str]
    prefix: str
    role: pulumi.Input[str]

    def __post_init__(self) -> None:
        check_account_id(self.account_id, "TeamTrainingIdentityArgs.account_id")
        if not self.prefix or "*" in self.prefix or self.prefix.startswith("/"):
            raise ValueError(
                f"TeamTrainingIdentityArgs.prefix: {self.prefix!r} must be a non-empty object "
                "prefix without wildcards or a leading slash"
            )


class TeamTrainingIdentity(pulumi.ComponentResource):
    """One team's Google service account, usable only by its training Kubernetes service
    account, with checkpoint access under `<prefix>/` only."""

    email: pulumi.Output[str]

    def __init__(
        self, name: str, args: TeamTrainingIdentityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:TeamTrainingIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = gcp.serviceaccount.Account(
            f"{name}-account",
            project=args.project,
            account_id=args.account_id,
            display_name=f"Training pods of {args.namespace}",
            opts=child,
        )
        gcp.serviceaccount.IAMMember(
            f"{name}-workload-identity",
            service_account_id=account.name,
            role="roles/iam.workloadIdentityUser",
            member=pulumi.Output.concat(
                "serviceAccount:",
                args.workload_pool,
                f"[{args.namespace}/{args.service_account}]",
            ),
            opts=child,
        )
        gcp.storage.BucketIAMMember(
            f"{name}-checkpoints",
            bucket=args.bucket,
            role=args.role,
            member=account.member,
            condition={
                "title": "own-checkpoint-prefix",
                "description": f"Objects under {args.prefix}/ only",
                "expression": pulumi.Output.from_input(args.bucket).apply(
                    lambda bucket: prefix_condition(bucket, args.prefix)
                ),
            },
            opts=child,
        )
        self.email = account.email
        self.register_outputs({"email": self.email})


def prefix_condition(bucket: str, prefix: str) -> str:
    """CEL: objects named `<prefix>/...`, and listings of that prefix only. The trailing `/`
    keeps `teams/vision` from matching `teams/vision-2/...`."""
    return (
        f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}/") || '
        '(resource.type == "storage.googleapis.com/Bucket" && '
        f'api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("{prefix}/"))'
    )


def _short(role: str) -> str:
    """`roles/container.admin` -> `container-admin`, for resource names."""
    return role.removeprefix("roles/").replace(".", "-").lower()
