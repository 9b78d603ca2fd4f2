"""The `aws` section of the stack config: the EKS cluster, its managed node groups, the checkpoint
bucket, the GPU quotas to request, the GPU AMI, who may assume the platform roles, the alarms and
the cloud drill. `StackConfig` (components/config/stack.py) holds it and runs the AWS checks that
span top-level fields."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from components.catalog import catalog
from components.config.schema import (
    DNS_LABEL,
    CreateOrAttach,
    GpuIdlePercent,
    InstanceTypes,
    Model,
    NonNegativeInt,
    PositiveInt,
    Schedule,
    ScheduledAction,
    ipv4_network,
)
from components.versions import GPU_AMI_ALIAS, KUBERNETES_RELEASES, KUBERNETES_VERSION

AWS_REGION = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"
# An IAM role or user (with an optional path): what a trust policy can name and IAM checks
# exists. Account roots, groups and assumed-role sessions are refused.
IAM_ROLE_OR_USER_ARN = (
    r"^arn:aws[a-z-]*:iam::(\d{12}):(role|user)/([\w+=,.@-]+/)*([\w+=,.@-]{1,64})$"
)


def _role_or_user(arn: str) -> str:
    if not re.fullmatch(IAM_ROLE_OR_USER_ARN, arn):
        raise ValueError(
            f"{arn!r} is not an IAM role or user ARN like "
            "'arn:aws:iam::123456789012:role/PlatformAdmins' (a trust policy may name only a "
            "role or user that exists)"
        )
    return arn


PrincipalArn = Annotated[str, AfterValidator(_role_or_user)]
PrincipalArns = list[PrincipalArn]


class ExistingCluster(Model):
    """Attach to a cluster created elsewhere; the platform adds pools and identities to it."""

    name: str = Field(pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
    subnet_ids: list[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]] = Field(
        min_length=1, description="Private subnets for the node groups, covering every zone."
    )


class NewCluster(Model):
    """Create the cluster with its VPC (public + private subnet per zone)."""

    name: str = Field(pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
    version: str = Field(
        default=KUBERNETES_VERSION,
        description="Kubernetes minor version; one of those components/versions.py pins "
        "add-ons for (the default is its current one).",
    )
    vpc_cidr: str = Field(default="10.0.0.0/16", pattern=r"^10\.\d{1,3}\.0\.0/16$")
    nat_gateway_per_zone: bool = Field(
        default=False, description="One NAT gateway per zone: egress survives a zone outage."
    )
    public_endpoint_cidrs: list[str] = Field(
        description="Networks that may reach the cluster's API endpoint from outside the VPC: "
        "where `pulumi up` and kubectl run. Required; [] means private only, and then "
        "`pulumi up` must run inside the VPC.",
    )

    @field_validator("vpc_cidr")
    @classmethod
    def _address(cls, value: str) -> str:
        ipv4_network(value)
        return value

    @field_validator("version")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if value not in KUBERNETES_RELEASES:
            raise ValueError(
                f"Kubernetes {value!r} has no pinned add-on versions in components/versions.py "
                f"(pinned: {', '.join(KUBERNETES_RELEASES)})"
            )
        return value

    @field_validator("public_endpoint_cidrs")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                network = ipaddress.ip_network(cidr)
            except ValueError:
                raise ValueError(f"{cidr!r} is not a network like '203.0.113.0/24'") from None
            if network.prefixlen == 0:
                raise ValueError(
                    f"{cidr!r} opens the API endpoint to the whole internet; list the networks "
                    "that run pulumi up and kubectl"
                )
        return value


class ClusterConfig(CreateOrAttach):
    create: NewCluster | None = None
    existing: ExistingCluster | None = None


class ScheduledSize(ScheduledAction):
    """One scheduled scaling action of an EC2 Auto Scaling group (cron in UTC)."""

    min_size: NonNegativeInt
    max_size: NonNegativeInt
    desired_size: NonNegativeInt

    @model_validator(mode="after")
    def _ordered(self) -> ScheduledSize:
        _check_sizes(self.min_size, self.desired_size, self.max_size)
        return self


class Pool(Model):
    """An EKS managed node group of on-demand instances."""

    instance_types: InstanceTypes
    capacity_type: Literal["ON_DEMAND"] = "ON_DEMAND"
    min_size: NonNegativeInt
    max_size: PositiveInt
    desired_size: NonNegativeInt
    disk_size_gib: int = Field(default=200, ge=20, le=16384)

    @model_validator(mode="after")
    def _ordered(self) -> Pool:
        _check_sizes(self.min_size, self.desired_size, self.max_size)
        return self


class StablePool(Pool):
    """Coordination, controllers (Karpenter, Kueue) and checkpoint-critical services."""


class BufferPool(Pool):
    schedule: Schedule[ScheduledSize] = Field(
        description="Scheduled actions switching the buffer between uses."
    )

    @field_validator("schedule")
    @classmethod
    def _within_pool(cls, value: list[ScheduledSize], info: ValidationInfo) -> list[ScheduledSize]:
        # An action sets the group's sizes itself: above max_size it escapes the limit that the
        # quotas and the capacity checks were sized for.
        limit = info.data.get("max_size")
        for action in value:
            if limit is not None and action.max_size > limit:
                raise ValueError(
                    f"action {action.name!r} raises the group to max_size {action.max_size}, "
                    f"above the pool's max_size {limit}"
                )
        return value


class Pools(Model):
    """The managed node groups: the stable tier, and optionally the scheduled buffer. GPU capacity
    for training is provisioned per GPU class (`gpu_classes`)."""

    stable: StablePool
    buffer: BufferPool | None = None


# S3 refuses a lifecycle rule that moves objects younger than 30 days to STANDARD_IA (S3 API
# reference, "Transition": Days).
MIN_TRANSITION_DAYS = {"STANDARD_IA": 30}


class Transition(Model):
    days: PositiveInt
    storage_class: Literal["STANDARD_IA", "INTELLIGENT_TIERING", "GLACIER_IR", "GLACIER"]

    @model_validator(mode="after")
    def _old_enough(self) -> Transition:
        least = MIN_TRANSITION_DAYS.get(self.storage_class, 0)
        if self.days < least:
            raise ValueError(
                f"S3 moves objects to {self.storage_class} at {least} days at the earliest, "
                f"not {self.days}"
            )
        return self


def s3_bucket_name_problem(name: str) -> str | None:
    """Why S3 would refuse this general purpose bucket name, or None (S3 User Guide, "General
    purpose bucket naming rules")."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name):
        return (
            "must be 3-63 lowercase letters, digits, '.' and '-', starting and ending with a "
            "letter or digit"
        )
    if ".." in name:
        return "must not contain two adjacent periods"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name):
        return "must not be formatted as an IP address"
    reserved = [p for p in S3_RESERVED_PREFIXES if name.startswith(p)]
    reserved += [s for s in S3_RESERVED_SUFFIXES if name.endswith(s)]
    if reserved:
        return f"must not use the reserved {reserved[0]!r}"
    return None


S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3")


class CheckpointStorage(Model):
    bucket_name: str | None = Field(
        default=None, description="Fixed bucket name; default: a generated unique name."
    )
    noncurrent_version_days: PositiveInt = 7
    noncurrent_versions_to_keep: int | None = Field(default=None, ge=1, le=100)
    abort_multipart_days: PositiveInt = 1
    transitions: list[Transition] = Field(default_factory=list)
    kms_deletion_window_days: int = Field(default=30, ge=7, le=30)

    @field_validator("bucket_name")
    @classmethod
    def _s3_accepts(cls, value: str | None) -> str | None:
        problem = value and s3_bucket_name_problem(value)
        if problem:
            raise ValueError(f"{value!r}: an S3 bucket name {problem}")
        return value

    @field_validator("transitions")
    @classmethod
    def _increasing(cls, value: list[Transition]) -> list[Transition]:
        days = [t.days for t in value]
        if days != sorted(set(days)):
            raise ValueError("transitions must have strictly increasing days")
        return value


def quota_field(family: str) -> str:
    """The field of a capacity type's GPU quota model that requests a quota family's vCPUs:
    "g-family" -> "g_family_vcpus"."""
    return f"{family.replace('-', '_')}_vcpus"


def _gpu_vcpu_quota(model: str, capacity: str) -> type[Model]:
    """One field per quota family of the catalog for `capacity`, so a new family needs no change
    here."""
    return create_model(
        model,
        __base__=Model,
        __doc__=f"Requested vCPU limits of the GPU instance families' {capacity} quotas (EC2 "
        "Service Quotas). Required for every family the stack's pools may launch: accounts "
        "start far below.",
        __module__=__name__,
        **{
            quota_field(family): (
                int | None,
                Field(default=None, ge=1, description=f"{quota.name}: vCPUs ({quota.code})."),
            )
            for family, quota in catalog("aws").quota_families[capacity].items()
        },
    )


SpotGpuVcpuQuota = _gpu_vcpu_quota("SpotGpuVcpuQuota", "spot")
OnDemandGpuVcpuQuota = _gpu_vcpu_quota("OnDemandGpuVcpuQuota", "on-demand")
GPU_QUOTA_CODES = {
    quota.code for families in catalog("aws").quota_families.values() for quota in families.values()
}


def _gpu_quota_codes(codes: list[str]) -> list[str]:
    unknown = sorted(set(codes) - GPU_QUOTA_CODES)
    if unknown:
        raise ValueError(
            f"{unknown} are no GPU vCPU quota of components/catalog.yaml "
            f"(one of {sorted(GPU_QUOTA_CODES)})"
        )
    return codes


class GpuAmi(Model):
    """The AMI of every GPU node. One CPU architecture: the training image is built for it."""

    alias: str = Field(
        default=GPU_AMI_ALIAS,
        pattern=r"^(al2023|bottlerocket)@v[0-9.]+$",
        description="Karpenter amiSelectorTerms alias, pinned to a version (never @latest).",
    )
    architecture: Literal["x86_64", "arm64"] = Field(
        default="x86_64", description="CPU architecture of the GPU nodes and the training image."
    )
    image_cache_snapshot: str | None = Field(
        default=None,
        pattern=r"^snap-[0-9a-f]{8,17}$",
        description="Opt-in image cache: an encrypted EBS snapshot of a Bottlerocket data volume "
        "with the training image already pulled, the data volume of every GPU node, so a new "
        "node starts the trainer without pulling it (docs/deploy.md). Needs a bottlerocket alias.",
    )

    @model_validator(mode="after")
    def _cache_needs_bottlerocket(self) -> GpuAmi:
        # Only Bottlerocket keeps containerd's images on a volume of their own (/dev/xvdb).
        if self.image_cache_snapshot and not self.alias.startswith("bottlerocket@"):
            raise ValueError(
                f"image_cache_snapshot needs a bottlerocket alias, not {self.alias!r}: only "
                "Bottlerocket keeps the images on a data volume a snapshot can fill"
            )
        return self


class Principals(Model):
    """IAM roles or users allowed to assume each platform role (ml-engineer roles are per team:
    `teams[].engineers`). They must exist before `pulumi up`: IAM refuses a trust policy that
    names one that does not, and the preview looks up those of the deploying account."""

    platform_admin: PrincipalArns = Field(
        min_length=1,
        description="Operate the platform; read and restore checkpoints, never destroy them.",
    )
    break_glass: PrincipalArns = Field(
        min_length=1,
        description="May assume, with MFA, the role that can change the checkpoint bucket's "
        "versioning, policy and lifecycle and delete object versions (docs/deploy.md).",
    )
    log_reader: PrincipalArns = Field(default_factory=list)


# How long the interruption queue keeps a message: a notice older than the spot warning itself is
# useless.
INTERRUPTION_QUEUE_RETENTION_SECONDS = 300


class Alarms(Model):
    interruptions_per_hour: PositiveInt = Field(
        default=10, description="Spot interruption warnings per hour that page."
    )
    queue_age_seconds: PositiveInt = Field(
        default=120,
        description="Oldest unhandled interruption event age that pages; below the queue's "
        f"{INTERRUPTION_QUEUE_RETENTION_SECONDS} s retention.",
    )
    gpu_idle_percent: GpuIdlePercent = 50

    @field_validator("queue_age_seconds")
    @classmethod
    def _can_fire(cls, value: int) -> int:
        if value >= INTERRUPTION_QUEUE_RETENTION_SECONDS:
            raise ValueError(
                f"{value} s can never fire: the interruption queue drops messages after "
                f"{INTERRUPTION_QUEUE_RETENTION_SECONDS} s; use a smaller age"
            )
        return value


class SpotDrill(Model):
    """Opt-in: the monthly cloud drill's AWS FIS experiment template (docs/operations.md)."""

    gpu_class: str = Field(pattern=DNS_LABEL, description="The GPU class whose spot nodes it hits.")
    percent: int = Field(
        default=50, ge=1, le=100, description="Share of the class's running spot nodes notified."
    )


class AwsConfig(Model):
    cluster: ClusterConfig
    pools: Pools
    checkpoint_storage: CheckpointStorage = Field(default_factory=CheckpointStorage)
    spot_gpu_quota: SpotGpuVcpuQuota = Field(default_factory=SpotGpuVcpuQuota)
    on_demand_gpu_quota: OnDemandGpuVcpuQuota = Field(default_factory=OnDemandGpuVcpuQuota)
    open_quota_requests: Annotated[list[str], AfterValidator(_gpu_quota_codes)] = Field(
        default_factory=list,
        description="Service Quotas codes of the GPU quotas whose increase request is already "
        "open (filed by hand, as docs/deploy.md advises, early): the stack files none for them, "
        "since Service Quotas allows one open request per quota (`spotctl preflight` lists "
        "them).",
    )
    gpu_ami: GpuAmi = Field(default_factory=GpuAmi)
    principals: Principals
    alarms: Alarms = Field(default_factory=Alarms)
    spot_drill: SpotDrill | None = Field(
        default=None, description="The cloud drill's experiment template; none by default."
    )


def requested_gpu_vcpus(aws_config: AwsConfig) -> dict[tuple[str, str], int]:
    """(capacity, family) -> vCPUs, for the GPU quotas the config requests."""
    quotas = {"spot": aws_config.spot_gpu_quota, "on-demand": aws_config.on_demand_gpu_quota}
    requested = {
        (capacity, family): getattr(quota, quota_field(family))
        for capacity, quota in quotas.items()
        for family in catalog("aws").quota_families[capacity]
    }
    return {key: vcpus for key, vcpus in requested.items() if vcpus is not None}


def _check_sizes(min_size: int, desired: int, max_size: int) -> None:
    if not min_size <= desired <= max_size:
        raise ValueError(
            f"sizes must satisfy min_size <= desired_size <= max_size, got "
            f"{min_size} <= {desired} <= {max_size}"
        )
