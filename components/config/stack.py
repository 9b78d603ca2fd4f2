"""The root of the stack config: one schema for every cloud, with a section per cloud.

Each top-level field of `StackConfig` is one Pulumi config key (`spot-training:<field>`) in
`stacks/Pulumi.<stack>.yaml`; the cloud sections (`aws`, `gcp`) and the cloud-neutral `kubernetes`
section live in modules of their own beside this one.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator

from components.config.aws import AWS_REGION, AwsConfig, PrincipalArns, Principals
from components.config.gcp import GCP_REGION, LABEL_KEY, LABEL_VALUE, GcpConfig
from components.config.kubernetes import NOTICE_SECONDS, KubernetesConfig, NoticeWindow
from components.config.schema import (
    DNS_LABEL,
    DURATION,
    InstanceTypes,
    Model,
    NonNegativeInt,
    PositiveInt,
    duration_seconds,
    secret_text,
)
from components.versions import RESERVED_NAMESPACES

# Object-key prefix: slash-separated segments, no leading/trailing slash, no wildcards.
KEY_PREFIX = r"^[A-Za-z0-9!_.'()-]+(/[A-Za-z0-9!_.'()-]+)*$"
# AWS tag limits (docs.aws.amazon.com, "Tag restrictions"): keys of 1-128 and values of 0-256
# letters, digits, spaces and `_ . : / = + - @`; the `aws:` prefix is AWS's own; 50 tags per
# resource.
TAG_KEY = r"^[A-Za-z0-9 _.:/=+@-]{1,128}$"
TAG_VALUE = re.compile(r"^[\w .:/=+@-]*$")
MAX_TAGS = 50
# Cost tags the platform sets on every taggable resource.
RESERVED_TAGS = ("team", "env", "capacity-type")
HTTPS_URL = r"^https://[A-Za-z0-9.-]+(:\d+)?(/\S*)?$"
# A webhook's URL carries its token: a credential.
WebhookUrl = secret_text(HTTPS_URL)
# The environment whose alerts page people: its links must lead somewhere.
PRODUCTION = "prod"


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
    webhook_url: WebhookUrl | None = Field(
        default=None,
        description="Optional webhook Alertmanager also posts to (chat, paging service); a "
        "credential, best kept encrypted (`pulumi config set --secret`).",
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
