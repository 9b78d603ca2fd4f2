"""Typed stack configuration: one schema for every cloud, with a section per cloud.

Each top-level field is one Pulumi config key (`spot-training:<field>`) in
`stacks/Pulumi.<stack>.yaml`. `load_config` turns the raw key/value map into a `StackConfig`, or
raises `ConfigError` whose message names every failing field path and, for an enumeration, its
allowed values.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NamedTuple, get_origin

from pydantic import (
    AfterValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from components.config.capacity import capacity_problems
from components.config.document import decode_values, document_problems
from components.config.gcp import (
    GCP_REGION,
    LABEL_KEY,
    LABEL_VALUE,
    GcpConfig,
    environment_problem,
)
from components.config.schema import (
    DNS_LABEL,
    DURATION,
    CreateOrAttach,
    Model,
    NonNegativeInt,
    PositiveInt,
    Schedule,
    ScheduledAction,
    duration_seconds,
)
from components.versions import (
    GPU_AMI_ALIAS,
    KUBERNETES_RELEASES,
    KUBERNETES_VERSION,
    RESERVED_NAMESPACES,
)

# Object-key prefix: slash-separated segments, no leading/trailing slash, no wildcards.
KEY_PREFIX = r"^[A-Za-z0-9!_.'()-]+(/[A-Za-z0-9!_.'()-]+)*$"
AWS_REGION = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"
# An IAM role or user (with an optional path): what a trust policy can name and IAM checks
# exists. Account roots, groups and assumed-role sessions are refused.
IAM_ROLE_OR_USER_ARN = (
    r"^arn:aws[a-z-]*:iam::(\d{12}):(role|user)/([\w+=,.@-]+/)*([\w+=,.@-]{1,64})$"
)
# AWS tag limits (docs.aws.amazon.com, "Tag restrictions"): keys of 1-128 and values of 0-256
# letters, digits, spaces and `_ . : / = + - @`; the `aws:` prefix is AWS's own; 50 tags per
# resource.
TAG_KEY = r"^[A-Za-z0-9 _.:/=+@-]{1,128}$"
TAG_VALUE = re.compile(r"^[\w .:/=+@-]*$")
MAX_TAGS = 50
# Cost tags the platform sets on every taggable resource.
RESERVED_TAGS = ("team", "env", "capacity-type")
HTTPS_URL = r"^https://[A-Za-z0-9.-]+(:\d+)?(/\S*)?$"
# The environment whose alerts page people: its links must lead somewhere.
PRODUCTION = "prod"

# Labels pydantic adds to error locations, e.g. "function-after[_check(), Pool]".
PYDANTIC_LABEL = re.compile(r"^(function-[a-z]+|[a-z]+-union|tagged-union)\[")


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


class ClassQuota(Model):
    """A team's GPUs of one class, by capacity type (Kueue's nominal quota)."""

    spot_gpus: NonNegativeInt = Field(default=0, description="GPUs the team may use on spot.")
    on_demand_gpus: NonNegativeInt = Field(
        default=0, description="GPUs the team may use on on-demand."
    )


class Team(Model):
    name: str = Field(pattern=DNS_LABEL, description="Team name; also its cost tag value.")
    namespace: str = Field(pattern=DNS_LABEL, description="Kubernetes namespace of the team.")
    quotas: dict[Annotated[str, Field(pattern=DNS_LABEL)], ClassQuota] = Field(
        min_length=1,
        description="GPU quota per GPU class (a name in `gpu_classes`); the first class is the "
        "one of the team's Job templates unless `kubernetes.templates.gpu_class` says otherwise.",
    )
    checkpoint_prefix: str = Field(
        pattern=KEY_PREFIX, description="Key prefix in the checkpoint bucket owned by the team."
    )
    service_account: str = Field(
        default="training",
        pattern=DNS_LABEL,
        description="Service account of the team's training pods, bound to its training role.",
    )
    engineers: PrincipalArns = Field(
        default_factory=list,
        description="Principals that may assume the team's ml-engineer role: edit rights in the "
        "team's namespace only.",
    )

    @field_validator("namespace")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_NAMESPACES:
            raise ValueError(
                f"namespace {value!r} belongs to Kubernetes or to an add-on the platform installs "
                f"(reserved: {', '.join(RESERVED_NAMESPACES)}); give the team its own"
            )
        return value


# EC2 instance types ("g5.xlarge") and Compute Engine machine types ("g2-standard-8").
INSTANCE_TYPE = r"^[a-z0-9]+(-[a-z0-9]+)*(\.[a-z0-9]+)?$"


def _unique(value: list[str]) -> list[str]:
    if len(set(value)) != len(value):
        raise ValueError("instance types must be unique")
    return value


InstanceTypes = Annotated[
    list[Annotated[str, Field(pattern=INSTANCE_TYPE)]],
    Field(min_length=1),
    AfterValidator(_unique),
]


class GpuClass(Model):
    """GPUs of one accelerator model and memory, e.g. `a10g-24gb`: what teams request.

    A class diversifies over instance sizes and zones, never across models: a job sized for one
    model fails or crawls on another, and exact resume holds only on the same hardware. Its spot
    capacity comes first; its on-demand capacity is the fallback when spot is dry.
    """

    name: str = Field(
        pattern=DNS_LABEL, description="<gpu model>-<GiB per GPU>gb, as the catalog names them."
    )
    instance_types: InstanceTypes = Field(
        description="Catalog types of this one accelerator, any size."
    )
    cpu_per_gpu: PositiveInt = Field(description="CPUs a pod requests (and Kueue counts) per GPU.")
    memory_gib_per_gpu: PositiveInt = Field(description="Memory (GiB) a pod requests per GPU.")
    spot_gpus: NonNegativeInt = Field(description="Most GPUs the class's spot pool may run.")
    on_demand_gpus: NonNegativeInt = Field(
        description="Most GPUs its on-demand pool may run: on-demand quotas plus spot fallback."
    )
    disk_size_gib: int = Field(
        default=200, ge=20, le=16384, description="Root volume: images and local staging."
    )
    zones: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Zones of the class's pools, among the stack's `zones`: those that offer its "
        "accelerator (GKE; the catalog says which). Default: the stack's zones.",
    )

    replacement_time: str = Field(
        default="5m",
        pattern=DURATION,
        description="How long a new node of the class takes to run a pod (launch, boot, image "
        "pull). A multi-node run's survivors wait twice this for a lost node's replacement, then "
        "stop with exit 75: requeued, not counted.",
    )

    @field_validator("replacement_time")
    @classmethod
    def _some_time(cls, value: str) -> str:
        if duration_seconds(value) == 0:
            raise ValueError(f"{value!r}: no node starts at once; give the time one takes")
        return value

    def pool_zones(self, stack_zones: list[str]) -> list[str]:
        return list(self.zones or stack_zones)

    def rendezvous_wait_s(self) -> int:
        """How long the survivors of a lost node wait for its replacement to join their gang."""
        return 2 * duration_seconds(self.replacement_time)


class Alerts(Model):
    """Where alerts go: CloudWatch alarms and Alertmanager both reach these targets."""

    emails: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]] = Field(
        min_length=1,
        description="Addresses subscribed to the alert topic (email through SNS); at least one, "
        "or alerts reach no one.",
    )
    webhook_url: str | None = Field(
        default=None,
        pattern=HTTPS_URL,
        description="Optional webhook Alertmanager also posts to (chat, paging service).",
    )
    runbook_base_url: str = Field(
        pattern=HTTPS_URL,
        description="Where this repository's runbooks/ are browsable; every alert and alarm "
        "links below it.",
    )

    @field_validator("runbook_base_url")
    @classmethod
    def _real_in_production(cls, value: str, info: ValidationInfo) -> str:
        if (info.context or {}).get("environment") == PRODUCTION and "example" in value.lower():
            raise ValueError(
                f"{value!r} is a placeholder; {PRODUCTION} alerts must link to where this "
                "repository's runbooks/ really are"
            )
        return value


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
        try:
            ipaddress.IPv4Network(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IPv4 network like '10.0.0.0/16'") from None
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


class GpuVcpuQuota(Model):
    """Requested vCPU limits of the GPU instance families (EC2 Service Quotas), for one capacity
    type. Required for every family the stack's pools may launch: accounts start far below."""

    p_family_vcpus: int | None = Field(default=None, ge=1, description="P instances' vCPUs.")
    g_family_vcpus: int | None = Field(default=None, ge=1, description="G and VT instances' vCPUs.")


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
    gpu_idle_percent: int = Field(
        default=50,
        ge=1,
        le=99,
        description="Average GPU idle share that warns (at 100 no utilisation is below it).",
    )

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
    spot_gpu_quota: GpuVcpuQuota = Field(default_factory=GpuVcpuQuota)
    on_demand_gpu_quota: GpuVcpuQuota = Field(default_factory=GpuVcpuQuota)
    gpu_ami: GpuAmi = Field(default_factory=GpuAmi)
    principals: Principals
    alarms: Alarms = Field(default_factory=Alarms)
    spot_drill: SpotDrill | None = Field(
        default=None, description="The cloud drill's experiment template; none by default."
    )


# Seconds between a cloud's termination notice and the kill, for pods (GKE: 15 of its 30 s).
NOTICE_SECONDS = {"aws": 120, "gcp": 15}
# How long after the notice the drain's SIGTERM may reach a pod. AWS: EventBridge, SQS and
# Karpenter's drain stand between them (Karpenter measures it as
# karpenter_interruption_message_queue_duration_seconds); GKE's graceful shutdown is on the node.
NOTICE_LAG_SECONDS = {"aws": 20, "gcp": 0}


class NoticeWindow(NamedTuple):
    """A spot pod's notice as the runtime gets it (SPOTSAFE_SIGTERM_GRACE_S and _LAG_S) and the
    planner plans it: one source for both."""

    grace_s: int
    """From the cloud's notice until the pod is killed."""
    lag_s: int
    """How late the drain's SIGTERM may follow the cloud's notice."""

    @classmethod
    def default(cls, cloud: str) -> NoticeWindow:
        """The cloud's defaults; on GKE the Spot pools' default shutdown grace for user pods."""
        return cls(NOTICE_SECONDS[cloud], NOTICE_LAG_SECONDS[cloud])

    @property
    def final_save_s(self) -> int:
        """What a final save has: the runtime's SIGTERM deadline is the grace less the lag."""
        return self.grace_s - self.lag_s


# The notice sources the runtime watches on each cloud. AWS: SIGTERM only, since EKS nodes keep
# the IMDS hop limit at 1 and a pod cannot reach IMDS.
NOTICE_SOURCES = {"aws": ("sigterm",), "gcp": ("sigterm", "gce")}


class KueueConfig(Model):
    install: bool = Field(
        default=True,
        description="Install Kueue (its chart pinned in components/versions.py) with this config.",
    )
    cohort: str = Field(default="training", pattern=DNS_LABEL)
    borrow_spot_gpus: NonNegativeInt = Field(
        default=0, description="Idle spot GPUs of other teams each team may borrow, per class."
    )
    pods_ready_timeout: str = Field(
        default="10m", pattern=DURATION, description="Admitted but not running: requeue after."
    )
    recovery_timeout: str = Field(
        default="15m", pattern=DURATION, description="A replacement pod not running: requeue after."
    )
    backoff_base_seconds: PositiveInt = 60
    backoff_max_seconds: PositiveInt = 900

    @field_validator("pods_ready_timeout", "recovery_timeout")
    @classmethod
    def _positive(cls, value: str) -> str:
        if duration_seconds(value) == 0:
            raise ValueError(f"{value!r} requeues every workload at once; give a positive time")
        return value

    @model_validator(mode="after")
    def _backoff_ordered(self) -> KueueConfig:
        if self.backoff_base_seconds > self.backoff_max_seconds:
            raise ValueError(
                f"backoff_base_seconds {self.backoff_base_seconds} exceeds backoff_max_seconds "
                f"{self.backoff_max_seconds}"
            )
        return self


# The training image's digest before one is built and pushed: the templates refer to the stack's
# repository, and nothing runs them yet.
UNBUILT_IMAGE = "sha256:" + "0" * 64


class JobTemplateConfig(Model):
    # Pinned by digest: an exact resume needs the exact code that wrote the checkpoint.
    image: str = Field(
        default=UNBUILT_IMAGE,
        pattern=r"^([a-z0-9.:/_-]+(:[A-Za-z0-9._-]+)?@)?sha256:[0-9a-f]{64}$",
        description="Training image: a digest `sha256:...` in the stack's own image repository, "
        "or a full reference pinned by digest. The default stands for an image not built yet "
        "(docs/deploy.md, section 7).",
    )
    command: list[str] = Field(
        default_factory=lambda: [
            "python",
            "-m",
            "spotsafe.examples.train",
            "--steps",
            "100000",
            "--checkpoint-uri",
            "$(CHECKPOINT_URI)",
            "--metrics-port",
            "9400",
        ],
        min_length=1,
    )
    priority_class: Literal["training-standard", "training-preemptible"] = "training-preemptible"
    gpu_class: str | None = Field(
        default=None,
        pattern=DNS_LABEL,
        description="GPU class of every team's templates; default: each team's first class.",
    )
    gpus_per_node: PositiveInt = Field(
        default=1, description="GPUs per pod; CPU and memory follow from the class, per GPU."
    )
    min_nodes: PositiveInt = 2
    max_nodes: PositiveInt = 4
    backoff_limit: NonNegativeInt = Field(
        default=3, description="Real failures a run may have; preemptions never count."
    )

    @model_validator(mode="after")
    def _nodes(self) -> JobTemplateConfig:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} exceeds max_nodes {self.max_nodes}")
        return self


class GpuHourPrices(Model):
    """USD per GPU-hour of one GPU class (an instance's price over its GPUs)."""

    on_demand: float = Field(
        gt=0, description="The provider's on-demand list price in the stack's region."
    )
    spot: float = Field(
        gt=0,
        description="The spot price the quarter is expected to average: AWS "
        "`aws ec2 describe-spot-price-history`, averaged over the class's types and zones; GCP "
        "the published Spot VM price, which Google changes at most once every 30 days.",
    )

    @model_validator(mode="after")
    def _spot_below_on_demand(self) -> GpuHourPrices:
        if self.spot > self.on_demand:
            raise ValueError(f"spot {self.spot} must not exceed on_demand {self.on_demand}")
        return self


class MonitoringConfig(Model):
    on_demand_gpu_hour_usd: float = Field(default=4.10, gt=0)
    spot_gpu_hour_usd: float = Field(default=1.60, gt=0)
    class_prices: dict[str, GpuHourPrices] = Field(
        default_factory=dict,
        description="GPU-hour prices by GPU class, for each team's cost (docs/goodput.md); a "
        "class not listed is priced at on_demand_gpu_hour_usd and spot_gpu_hour_usd.",
    )

    @model_validator(mode="after")
    def _prices(self) -> MonitoringConfig:
        if self.spot_gpu_hour_usd > self.on_demand_gpu_hour_usd:
            raise ValueError("spot_gpu_hour_usd must not exceed on_demand_gpu_hour_usd")
        return self

    def prices_of(self, gpu_class: str) -> GpuHourPrices:
        return self.class_prices.get(gpu_class) or GpuHourPrices(
            on_demand=self.on_demand_gpu_hour_usd, spot=self.spot_gpu_hour_usd
        )


class KubernetesConfig(Model):
    notice_seconds: PositiveInt | None = Field(
        default=None,
        description="Pod grace period = the cloud's notice; default AWS 120, GKE 15 (user pods).",
    )
    notice_lag_seconds: NonNegativeInt | None = Field(
        default=None,
        description="How late a drain's SIGTERM may follow the cloud's notice; the runtime plans "
        "its final save for notice - lag. Default AWS 20, GKE 0.",
    )
    gpu_resource: Literal["nvidia.com/gpu"] = Field(
        default="nvidia.com/gpu",
        description="The GPUs' extended resource: one the platform's device plugin advertises "
        "(NVIDIA's, on both clouds); a pod requesting any other would stay Pending.",
    )
    kueue: KueueConfig = Field(default_factory=KueueConfig)
    templates: JobTemplateConfig = Field(default_factory=JobTemplateConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)

    def notice_for(self, cloud: str) -> int:
        return self.notice_seconds or NOTICE_SECONDS[cloud]

    def notice_lag_for(self, cloud: str) -> int:
        if self.notice_lag_seconds is None:
            return NOTICE_LAG_SECONDS[cloud]
        return self.notice_lag_seconds


class StackConfig(Model):
    """Root of the stack config. A new concern adds one optional section field here."""

    environment: str = Field(pattern=DNS_LABEL, description="Environment name, e.g. dev, prod.")
    cloud: Literal["aws", "gcp"]
    region: str
    zones: list[str] = Field(min_length=1)
    gpu_classes: list[GpuClass] = Field(min_length=1)
    teams: list[Team] = Field(min_length=1)
    alerts: Alerts
    cost_tags: dict[
        Annotated[str, Field(pattern=TAG_KEY)], Annotated[str, Field(max_length=256)]
    ] = Field(default_factory=dict, max_length=MAX_TAGS - len(RESERVED_TAGS))
    aws: AwsConfig | None = Field(default=None, validate_default=True)
    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    gcp: GcpConfig | None = Field(default=None, validate_default=True)

    def notice_window(self) -> NoticeWindow:
        """The spot pods' notice: kubernetes.notice_seconds, else the cloud's (on GKE what the
        Spot pools' shutdown grace leaves user pods), less the drain's lag."""
        kube = self.kubernetes
        grace = kube.notice_seconds or (
            self.gcp.spot_shutdown.user_pods_seconds
            if self.cloud == "gcp" and self.gcp is not None
            else NOTICE_SECONDS[self.cloud]
        )
        return NoticeWindow(grace, kube.notice_lag_for(self.cloud))

    def trusted_principals(self) -> list[tuple[str, str]]:
        """(config path, ARN) of every person the stack's AWS roles trust."""
        found = [
            (f"teams[{t}].engineers[{i}]", arn)
            for t, team in enumerate(self.teams)
            for i, arn in enumerate(team.engineers)
        ]
        if self.aws is not None:
            for field_name in Principals.model_fields:
                arns = getattr(self.aws.principals, field_name)
                found += [(f"aws.principals.{field_name}[{i}]", a) for i, a in enumerate(arns)]
        return found

    # Fields validate in declaration order, so each check below sees the fields above it.
    @field_validator("region")
    @classmethod
    def _region_of_cloud(cls, value: str, info: ValidationInfo) -> str:
        cloud = info.data.get("cloud")
        if cloud == "aws" and not re.match(AWS_REGION, value):
            raise ValueError(f"{value!r} is not an AWS region like 'us-east-1'")
        if cloud == "gcp" and not re.fullmatch(GCP_REGION, value):
            raise ValueError(f"{value!r} is not a GCP region like 'us-central1'")
        return value

    @field_validator("zones")
    @classmethod
    def _zones_of_region(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("zones must be unique")
        region = info.data.get("region")
        # AWS zones append a letter to the region ("us-east-1a"), GCP zones a dash and a letter.
        zone = {"aws": "{}[a-z]", "gcp": "{}-[a-z]"}.get(info.data.get("cloud"))
        if zone and region:
            outside = [z for z in value if not re.fullmatch(zone.format(re.escape(region)), z)]
            if outside:
                raise ValueError(f"zones {outside} are not zones of region {region!r}")
        return value

    @field_validator("gpu_classes")
    @classmethod
    def _class_zones_of_stack(cls, value: list[GpuClass], info: ValidationInfo) -> list[GpuClass]:
        if "zones" not in info.data:
            return value  # reported at zones
        zones = info.data["zones"]
        for gpu_class in value:
            outside = sorted(set(gpu_class.zones or ()) - set(zones))
            if outside:
                raise ValueError(
                    f"class {gpu_class.name!r}: zones {outside} are not among the stack's zones "
                    f"(zones[] = {zones})"
                )
        return value

    @field_validator("cost_tags")
    @classmethod
    def _no_reserved_tags(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        reserved = sorted(set(value) & set(RESERVED_TAGS))
        if reserved:
            raise ValueError(f"tags {reserved} are set by the platform; remove them")
        aws_prefixed = sorted(
            k for k, v in value.items() if any(t.lower().startswith("aws:") for t in (k, v))
        )
        if aws_prefixed:
            raise ValueError(f"tags {aws_prefixed}: the 'aws:' prefix is reserved for AWS")
        odd = sorted(k for k, v in value.items() if not TAG_VALUE.match(v))
        if odd:
            raise ValueError(
                f"tags {odd}: values hold letters, digits, spaces and '_ . : / = + - @' only"
            )
        if info.data.get("cloud") == "gcp":
            bad = sorted(
                k for k, v in value.items() if not (LABEL_KEY.match(k) and LABEL_VALUE.match(v))
            )
            if bad:
                raise ValueError(
                    f"tags {bad} are not GCP labels (lowercase letters, digits, '_' and '-'; "
                    "keys start with a letter; at most 63 characters)"
                )
        return value

    @field_validator("gpu_classes")
    @classmethod
    def _distinct_classes(cls, value: list[GpuClass]) -> list[GpuClass]:
        names = [c.name for c in value]
        if len(set(names)) != len(names):
            raise ValueError(f"GPU class names must be unique, got {names}")
        return value

    @field_validator("teams")
    @classmethod
    def _distinct_teams(cls, value: list[Team]) -> list[Team]:
        for attr in ("name", "namespace", "checkpoint_prefix"):
            seen = [getattr(team, attr) for team in value]
            if len(set(seen)) != len(seen):
                raise ValueError(f"team {attr}s must be unique, got {seen}")
        prefixes = [team.checkpoint_prefix for team in value]
        for a in prefixes:
            for b in prefixes:
                if a != b and b.startswith(a + "/"):
                    raise ValueError(f"checkpoint prefix {b!r} lies inside {a!r}")
        return value

    @field_validator("teams")
    @classmethod
    def _engineers_of_cloud(cls, value: list[Team], info: ValidationInfo) -> list[Team]:
        if info.data.get("cloud") != "gcp":
            return value
        for index, team in enumerate(value):
            if team.engineers:
                raise ValueError(
                    f"teams[{index}].engineers: IAM role ARNs grant nothing on GCP; list the "
                    f"team's members in gcp.groups.team_engineers[{team.name!r}]"
                )
        return value

    @field_validator("kubernetes")
    @classmethod
    def _notice_of_cloud(cls, value: KubernetesConfig, info: ValidationInfo) -> KubernetesConfig:
        # GKE's budget depends on the pools' shutdown grace; the `gcp` section checks it.
        if info.data.get("cloud") == "aws" and value.notice_for("aws") > NOTICE_SECONDS["aws"]:
            raise ValueError(
                f"notice_seconds {value.notice_seconds} exceeds the {NOTICE_SECONDS['aws']} s "
                "an EC2 spot interruption notice gives"
            )
        return value

    @field_validator("aws")
    @classmethod
    def _aws_only_on_aws(cls, value: AwsConfig | None, info: ValidationInfo) -> AwsConfig | None:
        cloud = info.data.get("cloud")
        if cloud == "aws" and value is None:
            raise ValueError("cloud 'aws' needs this section")
        if cloud == "gcp" and value is not None:
            raise ValueError("an AWS section in a 'gcp' stack; remove it")
        existing = value.cluster.existing if value is not None else None
        zones = info.data.get("zones") or []
        if existing is not None and len(existing.subnet_ids) < len(zones):
            raise ValueError(
                f"cluster.existing.subnet_ids: {len(existing.subnet_ids)} subnets cannot cover "
                f"the {len(zones)} zones {zones}; give one private subnet per zone"
            )
        return value

    @field_validator("gcp")
    @classmethod
    def _gcp_only_on_gcp(cls, value: GcpConfig | None, info: ValidationInfo) -> GcpConfig | None:
        cloud = info.data.get("cloud")
        if cloud == "gcp" and value is None:
            raise ValueError("cloud 'gcp' needs this section")
        if cloud == "aws" and value is not None:
            raise ValueError("a GCP section in an 'aws' stack; remove it")
        if value is None:
            return value
        teams = {team.name for team in info.data.get("teams") or []}
        unknown = sorted(set(value.groups.team_engineers) - teams)
        if "teams" in info.data and unknown:
            raise ValueError(
                f"groups.team_engineers names teams {unknown} that are not in teams[].name "
                f"({', '.join(sorted(teams))})"
            )
        kubernetes = info.data.get("kubernetes")
        notice = kubernetes.notice_seconds if kubernetes is not None else None
        budget = value.spot_shutdown.user_pods_seconds
        if notice is not None and notice > budget:
            raise ValueError(
                f"kubernetes.notice_seconds {notice} exceeds the {budget} s that Spot shutdown "
                "gives user pods (spot_shutdown.seconds - critical_pods_seconds)"
            )
        return value


class ConfigError(ValueError):
    """A stack config that does not validate. `problems` holds (field path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]], namespace: str = "") -> None:
        self.problems = problems
        prefix = f"{namespace}:" if namespace else ""
        lines = [f"  {prefix}{path}: {message}" for path, message in problems]
        super().__init__("invalid stack config:\n" + "\n".join(lines))


# Top-level fields whose value is text: Pulumi's string form of `"true"` or `"123"` is the value.
STRING_FIELDS = tuple(
    name
    for name, field in StackConfig.model_fields.items()
    if field.annotation is str or get_origin(field.annotation) is Literal
)


def load_values(values: Mapping[str, str], namespace: str) -> StackConfig:
    """`load_config` on the stack's config as Pulumi hands it to the program: every key
    namespaced, every value a string (structured ones JSON-encoded)."""
    raw, problems = decode_values(values, namespace, STRING_FIELDS)
    if problems:
        raise ConfigError(problems)
    return load_config(raw, namespace)


def load_config(raw: dict[str, Any], namespace: str = "") -> StackConfig:
    """Validate the raw config map (field -> decoded value); raise ConfigError on any problem.

    The document first (`components.config.document`), then the schema; then, on a valid
    document, whether its capacity can run its jobs (`components.config.capacity`: catalog, classes,
    quotas, fit).
    """
    problems = document_problems(raw)
    if problems:
        raise ConfigError([(_path(loc), message) for loc, message in problems], namespace)
    environment = raw.get("environment") if isinstance(raw, dict) else None
    try:
        config = StackConfig.model_validate(raw, context={"environment": environment})
    except ValidationError as exc:
        raise ConfigError(
            [(_path(err["loc"]), _message(err)) for err in exc.errors()], namespace
        ) from None
    problem = config.cloud == "gcp" and environment_problem(config.environment)
    problems = [("environment", problem)] if problem else capacity_problems(config)
    if problems:
        raise ConfigError(problems, namespace)
    return config


def _path(loc: tuple[str | int, ...]) -> str:
    """pydantic's error location as the user wrote it: `teams[0].name`, `cost_tags['a b']`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]" or PYDANTIC_LABEL.match(part):
            continue  # pydantic's own labels, not part of the user's document
        elif re.fullmatch(r"[A-Za-z0-9_-]+", part):
            path += f".{part}" if path else part
        else:
            path += f"[{part!r}]"
    return path or "(root)"


def _message(err: dict[str, Any]) -> str:
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return "unknown field (check the spelling against the schema)"
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "string_pattern_mismatch":
        return f"{err['input']!r} does not match {err['ctx']['pattern']}"
    return message


def _check_sizes(min_size: int, desired: int, max_size: int) -> None:
    if not min_size <= desired <= max_size:
        raise ValueError(
            f"sizes must satisfy min_size <= desired_size <= max_size, got "
            f"{min_size} <= {desired} <= {max_size}"
        )
