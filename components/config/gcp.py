"""The `gcp` section of the stack config, and what GKE allows for a Spot node's shutdown.

`GcpConfig` is the section's schema; `StackConfig` (components/config/stack.py) holds it and runs
the GCP checks that span top-level fields (a zone of the region, cost tags that GCP accepts as
labels, no AWS section in a GCP stack and the reverse).
"""

from __future__ import annotations

import ipaddress
import re
import zoneinfo
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from components.catalog import catalog
from components.config.schema import (
    DNS_LABEL,
    CreateOrAttach,
    GpuIdlePercent,
    Model,
    NonNegativeInt,
    PositiveInt,
    Schedule,
    ScheduledAction,
    ipv4_network,
)
from components.versions import GKE_RELEASE_CHANNEL, GKE_VERSION

GCP_PROJECT = r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$"
# The environment names the stack's service accounts (ids start with a letter) and custom roles
# (`spotTraining<Title>_<env>`, at most 64 characters): a DNS label of at most 38 characters that
# starts with a letter.
GCP_ENVIRONMENT = r"^[a-z]([-a-z0-9]{0,36}[a-z0-9])?$"
# GKE quotas and limits: 1,000 nodes per node pool in each zone.
MAX_NODES_PER_POOL_ZONE = 1000
# A VPC subnet range (primary or secondary) is a /29 at the smallest; a node takes a /24 of the
# Pod range (110 Pods per node, GKE's default).
MAX_RANGE_PREFIX = {"nodes_cidr": 29, "pods_cidr": 24, "services_cidr": 29}
GCP_REGION = r"^[a-z]+-[a-z]+\d+$"
# GKE cluster names: lowercase, start with a letter, at most 40 characters.
GKE_CLUSTER_NAME = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
# "1.35" (any patch of the minor) or an exact GKE version "1.35.0-gke.1171000".
GKE_VERSION_PATTERN = r"^1\.\d{2}(\.\d+-gke\.\d+)?$"
IAM_MEMBER = r"^(group|user|serviceAccount):[^@\s*?]+@[^@\s*?]+\.[^@\s*?]+$"
# GCP label keys and values: lowercase letters, digits, '_' and '-'; keys start with a letter.
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")

# Kubelet shutdown grace on a Spot node: GKE gives 30 s (15 s to user pods, 15 s to critical
# ones) unless the pool says otherwise; from this version on, a Spot pool may ask for 120 s.
# GKE's node system configuration (kubeletConfig.shutdownGracePeriodSeconds) takes 0, 30 or 120
# and nothing between; 0 turns graceful shutdown off, which leaves a training pod no final save.
DEFAULT_SHUTDOWN_GRACE_SECONDS = 30
DEFAULT_CRITICAL_PODS_SECONDS = 15
MAX_SHUTDOWN_GRACE_SECONDS = 120
EXTENDED_GRACE_VERSION = "1.35.0-gke.1171000"


def gke_version_key(version: str) -> tuple[int, int, int, int]:
    """Orderable form of "1.35.0-gke.1171000"; a bare minor ("1.35") sorts before its patches."""
    match = re.fullmatch(r"1\.(\d+)(?:\.(\d+)-gke\.(\d+))?", version)
    if match is None:
        raise ValueError(f"{version!r} is not a GKE version like '1.35' or '1.35.0-gke.1171000'")
    minor, patch, build = match.groups()
    return 1, int(minor), int(patch or 0), int(build or 0)


def extended_grace_supported(version: str, *, new_cluster: bool) -> bool:
    """Whether a cluster of this version may give Spot nodes more than 30 s of shutdown grace.

    A new cluster asked for a bare minor gets the minor's highest patch GKE offers (the GKE API's
    `initialClusterVersion`: "1.X" picks the highest valid patch), which is never older than a
    patch already released: the minor alone decides. An existing cluster's nodes may run any
    patch of its minor, so only its exact version does."""
    key, needed = gke_version_key(version), gke_version_key(EXTENDED_GRACE_VERSION)
    if new_cluster and "-gke." not in version:
        return key[:2] >= needed[:2]
    return key >= needed


def gcs_bucket_name_problem(name: str) -> str | None:
    """Why GCS would refuse this bucket name, or None (cloud.google.com/storage/docs/buckets)."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*[a-z0-9]", name):
        return (
            "must use lowercase letters, digits, '-', '_' and '.', and start and end with a "
            "letter or digit"
        )
    if not 3 <= len(name) <= 222 or any(len(part) > 63 for part in name.split(".")):
        return "must be 3-63 characters (up to 222 with dots, at most 63 between dots)"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name):
        return "must not look like an IP address"
    if name.startswith("goog") or "google" in name or "g00gle" in name:
        return "must not start with 'goog' or contain 'google'"
    return None


class GkeNetwork(Model):
    """Address plan of the VPC a new cluster gets: private RFC 1918 ranges that do not overlap."""

    nodes_cidr: str = Field(default="10.10.0.0/20", description="Subnet of the nodes.")
    pods_cidr: str = Field(default="10.16.0.0/14", description="Secondary range for pods.")
    services_cidr: str = Field(default="10.20.0.0/20", description="Secondary range, Services.")
    control_plane_cidr: str = Field(
        default="172.16.0.0/28", description="/28 for the control plane's private endpoint."
    )
    nat_addresses: int = Field(
        default=2,
        ge=1,
        le=16,
        description="Static external addresses Cloud NAT leaves through (about 1,000 nodes "
        "each at 64 ports a node); allowlist them at the SMTP relay.",
    )

    @field_validator("nodes_cidr", "pods_cidr", "services_cidr", "control_plane_cidr")
    @classmethod
    def _private_network(cls, value: str) -> str:
        network = ipv4_network(value)
        if not network.is_private:
            raise ValueError(f"{value!r} is not a private (RFC 1918) range")
        return value

    @field_validator("nodes_cidr", "pods_cidr", "services_cidr")
    @classmethod
    def _large_enough(cls, value: str, info: ValidationInfo) -> str:
        most = MAX_RANGE_PREFIX[info.field_name]
        if ipaddress.IPv4Network(value).prefixlen > most:
            raise ValueError(f"{value!r} is too small for GKE: a /{most} at the smallest")
        return value

    @field_validator("control_plane_cidr")
    @classmethod
    def _slash_28(cls, value: str) -> str:
        if ipaddress.IPv4Network(value).prefixlen != 28:
            raise ValueError(f"{value!r}: GKE needs a /28 for the control plane")
        return value

    @model_validator(mode="after")
    def _disjoint(self) -> GkeNetwork:
        ranges = {
            name: ipaddress.IPv4Network(getattr(self, name))
            for name in ("nodes_cidr", "pods_cidr", "services_cidr", "control_plane_cidr")
        }
        names = list(ranges)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if ranges[a].overlaps(ranges[b]):
                    raise ValueError(f"{a} {ranges[a]} overlaps {b} {ranges[b]}")
        return self


class AuthorizedNetwork(Model):
    name: str = Field(pattern=DNS_LABEL)
    cidr: str

    @field_validator("cidr")
    @classmethod
    def _network(cls, value: str) -> str:
        network = ipv4_network(value)
        if network.prefixlen == 0:
            raise ValueError(
                f"{value!r} opens the control plane to the whole internet; list the networks "
                "that run pulumi up and kubectl"
            )
        return value


class NewGkeCluster(Model):
    """Create a regional GKE Standard cluster with its own VPC."""

    name: str = Field(pattern=GKE_CLUSTER_NAME)
    release_channel: Literal["RAPID", "REGULAR", "STABLE"] = GKE_RELEASE_CHANNEL
    version: str = Field(
        default=GKE_VERSION,
        pattern=GKE_VERSION_PATTERN,
        description="Minor the cluster starts on, e.g. '1.35' (GKE picks its newest patch in the "
        "channel, which upgrades from there); an exact patch only if you must, since GKE "
        "withdraws old patches for new clusters. It decides how much shutdown grace a Spot pool "
        "may have.",
    )
    network: GkeNetwork = Field(default_factory=GkeNetwork)
    authorized_networks: list[AuthorizedNetwork] = Field(
        default_factory=list,
        description="Networks allowed to reach the control plane's public endpoint; empty = "
        "private endpoint only.",
    )
    rbac_security_group: str | None = Field(
        default=None,
        pattern=r"^gke-security-groups@[^@\s]+\.[^@\s]+$",
        description="Google Groups for RBAC: the gke-security-groups group of your domain.",
    )


class ExistingGkeCluster(Model):
    """Attach to a regional GKE cluster created elsewhere (Workload Identity enabled)."""

    name: str = Field(pattern=GKE_CLUSTER_NAME)
    version: str = Field(
        pattern=GKE_VERSION_PATTERN,
        description="Version its nodes run; decides the Spot shutdown grace.",
    )


class GkeClusterConfig(CreateOrAttach):
    create: NewGkeCluster | None = None
    existing: ExistingGkeCluster | None = None

    @property
    def version(self) -> str:
        return (self.create or self.existing).version

    @property
    def extended_grace_supported(self) -> bool:
        return extended_grace_supported(self.version, new_cluster=self.create is not None)


class StablePoolConfig(Model):
    """The on-demand pool for coordination, controllers and checkpoint-critical services."""

    machine_type: str = Field(default="e2-standard-8", pattern=r"^[a-z0-9]+-[a-z0-9-]+$")
    min_nodes_per_zone: NonNegativeInt = 1
    max_nodes_per_zone: int = Field(default=3, ge=1, le=MAX_NODES_PER_POOL_ZONE)
    disk_size_gb: int = Field(default=100, ge=20, le=65536)

    @model_validator(mode="after")
    def _ordered(self) -> StablePoolConfig:
        if self.min_nodes_per_zone > self.max_nodes_per_zone:
            raise ValueError(
                f"min_nodes_per_zone {self.min_nodes_per_zone} exceeds max_nodes_per_zone "
                f"{self.max_nodes_per_zone}"
            )
        return self


class ScheduledNodeCount(ScheduledAction):
    """One action of the buffer's schedule: a Cloud Scheduler job that sets the pool's size."""

    time_zone: str = Field(
        default="Etc/UTC",
        description="tz database name the recurrence is read in, e.g. 'America/Chicago'.",
    )
    nodes_per_zone: int = Field(
        ge=0,
        le=MAX_NODES_PER_POOL_ZONE,
        description="Nodes in each of the pool's zones from this action on (GKE counts per zone).",
    )

    @field_validator("time_zone")
    @classmethod
    def _known_time_zone(cls, value: str) -> str:
        if value not in zoneinfo.available_timezones():
            raise ValueError(
                f"{value!r} is not a tz database time zone like 'Etc/UTC' or 'America/Chicago'"
            )
        return value


class BufferPoolConfig(Model):
    """On-demand nodes whose count follows a schedule: services by day, training by night. GKE has
    no scheduled pool size, so one Cloud Scheduler job per action resizes the pool through the
    GKE API. A pool of GPU machines joins the GPU class of its accelerator."""

    machine_type: str = Field(pattern=r"^[a-z0-9]+-[a-z0-9-]+$")
    zones: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Zones of the pool, among the stack's `zones`; a GPU pool's must offer its "
        "accelerator (the catalog says which). Default: the stack's zones.",
    )
    disk_size_gb: int = Field(default=200, ge=20, le=65536)
    schedule: Schedule[ScheduledNodeCount] = Field(
        description="Actions that switch the buffer between uses, each setting its size."
    )

    def pool_zones(self, stack_zones: list[str]) -> list[str]:
        return list(self.zones or stack_zones)


class ShutdownGrace(Model):
    """Kubelet graceful shutdown on Spot nodes: all pods get `seconds` from the preemption notice
    to the power-off, critical pods the last `critical_pods_seconds` of it."""

    seconds: int = DEFAULT_SHUTDOWN_GRACE_SECONDS
    critical_pods_seconds: NonNegativeInt = DEFAULT_CRITICAL_PODS_SECONDS

    @field_validator("seconds")
    @classmethod
    def _gke_accepts(cls, value: int) -> int:
        if value not in (DEFAULT_SHUTDOWN_GRACE_SECONDS, MAX_SHUTDOWN_GRACE_SECONDS):
            raise ValueError(
                f"{value} s: GKE accepts a Spot node's shutdown grace of 0, 30 or 120 s only, and "
                "0 turns graceful shutdown off (no final save); use 30 or 120"
            )
        return value

    @property
    def is_gke_default(self) -> bool:
        """GKE's own setting: a pool that asks for it sends no kubelet config (an older cluster
        refuses any, even this one)."""
        return (self.seconds, self.critical_pods_seconds) == (
            DEFAULT_SHUTDOWN_GRACE_SECONDS,
            DEFAULT_CRITICAL_PODS_SECONDS,
        )

    @model_validator(mode="after")
    def _room_for_user_pods(self) -> ShutdownGrace:
        if self.critical_pods_seconds >= self.seconds:
            raise ValueError(
                f"critical_pods_seconds {self.critical_pods_seconds} leaves user pods nothing of "
                f"the {self.seconds} s; keep it below seconds"
            )
        return self

    @property
    def user_pods_seconds(self) -> int:
        """Notice to kill for a training pod: what the runtime's final save has."""
        return self.seconds - self.critical_pods_seconds


class GcsCheckpointStorage(Model):
    bucket_name: str | None = Field(
        default=None, description="Fixed bucket name; default: a generated unique name."
    )
    noncurrent_version_days: PositiveInt = 7
    noncurrent_versions_to_keep: int | None = Field(default=None, ge=1, le=100)
    abort_multipart_days: PositiveInt = 1
    soft_delete_days: int = Field(
        default=7, ge=7, le=90, description="Deleted objects stay restorable this long."
    )
    key_rotation_days: int = Field(default=90, ge=1, le=365, description="CMEK rotation period.")

    @field_validator("bucket_name")
    @classmethod
    def _gcs_accepts(cls, value: str | None) -> str | None:
        problem = value and gcs_bucket_name_problem(value)
        if problem:
            raise ValueError(f"{value!r}: a GCS bucket name {problem}")
        return value


class Groups(Model):
    """IAM members (group:, user:, serviceAccount:) of each platform role."""

    platform_admin: list[Annotated[str, Field(pattern=IAM_MEMBER)]] = Field(min_length=1)
    ml_engineer: list[Annotated[str, Field(pattern=IAM_MEMBER)]] = Field(default_factory=list)
    log_reader: list[Annotated[str, Field(pattern=IAM_MEMBER)]] = Field(
        default_factory=list, description="Read logs; view (never edit) the team namespaces."
    )
    team_engineers: dict[str, list[Annotated[str, Field(pattern=IAM_MEMBER)]]] = Field(
        default_factory=dict,
        description="By team name: who may edit that team's namespace only (RBAC through Google "
        "Groups for RBAC); they are ML engineers of the project too.",
    )

    @property
    def rbac_groups(self) -> list[str]:
        """The Google Groups that RoleBindings in the team namespaces name (log readers view,
        team engineers edit)."""
        bound = [*self.log_reader, *(m for ms in self.team_engineers.values() for m in ms)]
        return [m for m in dict.fromkeys(bound) if m.startswith("group:")]


class SmtpRelay(Model):
    """Where Alertmanager hands its email (GCP has no message service it can publish to): a
    relay that accepts mail from the cluster's egress, such as Google Workspace's SMTP relay
    allowing the Cloud NAT addresses (docs/deploy-gcp.md)."""

    smarthost: str = Field(
        pattern=r"^[A-Za-z0-9.-]+:\d+$", description="host:port of the relay, with STARTTLS."
    )
    sender: str = Field(
        pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", description="From address of alert mail."
    )

    @field_validator("smarthost")
    @classmethod
    def _port(cls, value: str) -> str:
        port = int(value.rpartition(":")[2])
        if not 1 <= port <= 65535:
            raise ValueError(f"{value!r}: port {port} is not a TCP port (1-65535)")
        return value


class GcpAlarms(Model):
    preemptions_per_hour: PositiveInt = Field(
        default=10, description="Spot preemptions per hour that page."
    )
    gpu_idle_percent: GpuIdlePercent = 50


def environment_problem(environment: str) -> str | None:
    """Why the GCP ids built from this environment name would be refused, or None."""
    if re.fullmatch(GCP_ENVIRONMENT, environment):
        return None
    return (
        f"{environment!r} cannot name GCP service accounts and custom roles: start with a "
        "letter, at most 38 lowercase letters, digits and '-'"
    )


def rbac_subject(member: str) -> dict:
    """An IAM member as GKE's RBAC names it: groups by address (Google Groups for RBAC), users
    and Google service accounts by email."""
    kind, _, email = member.partition(":")
    return {
        "kind": "Group" if kind == "group" else "User",
        "name": email,
        "apiGroup": "rbac.authorization.k8s.io",
    }


class GcpConfig(Model):
    project: str = Field(pattern=GCP_PROJECT, description="Project id that holds the platform.")
    cluster: GkeClusterConfig
    stable_pool: StablePoolConfig = Field(default_factory=StablePoolConfig)
    buffer_pool: BufferPoolConfig | None = Field(
        default=None, description="Optional on-demand pool sized by a schedule."
    )
    spot_shutdown: ShutdownGrace = Field(default_factory=ShutdownGrace)
    active_migration: bool = Field(
        default=True,
        description="Move running spot-first pods from on-demand back to spot when spot returns "
        "(ComputeClass activeMigration): an eviction the runtime handles as a notice. False: "
        "back to spot only at the next restart, as on EKS.",
    )
    image_streaming: bool = Field(
        default=False,
        description="Opt-in GKE image streaming on the GPU pools (class and buffer): a new "
        "node starts the trainer while its image's data streams from Artifact Registry, "
        "instead of after a full pull (docs/deploy-gcp.md).",
    )
    checkpoint_storage: GcsCheckpointStorage = Field(default_factory=GcsCheckpointStorage)
    spot_gpu_quota: dict[str, PositiveInt] = Field(
        default_factory=dict,
        description="Preemptible GPUs to request in the stack's region, by accelerator type.",
    )
    groups: Groups
    alert_email: SmtpRelay = Field(description="How Alertmanager's alerts reach alerts.emails.")
    alarms: GcpAlarms = Field(default_factory=GcpAlarms)

    @field_validator("spot_shutdown")
    @classmethod
    def _grace_of_version(cls, value: ShutdownGrace, info: ValidationInfo) -> ShutdownGrace:
        cluster = info.data.get("cluster")
        if (
            cluster is not None
            and value.seconds > DEFAULT_SHUTDOWN_GRACE_SECONDS
            and not cluster.extended_grace_supported
        ):
            existing_minor = cluster.existing is not None and "-gke." not in cluster.version
            raise ValueError(
                f"seconds {value.seconds} needs GKE {EXTENDED_GRACE_VERSION} or later; cluster "
                f"version {cluster.version!r} allows at most {DEFAULT_SHUTDOWN_GRACE_SECONDS}"
                + (
                    " (the nodes of an existing cluster may run any patch of its minor: set "
                    "gcp.cluster.existing.version to their exact version)"
                    if existing_minor
                    else ""
                )
            )
        return value

    @field_validator("groups")
    @classmethod
    def _groups_reach_rbac(cls, value: Groups, info: ValidationInfo) -> Groups:
        """GKE matches a RoleBinding's Group subject only through Google Groups for RBAC: the
        cluster names the domain's gke-security-groups, whose members the groups must be."""
        cluster, bound = info.data.get("cluster"), value.rbac_groups
        create = cluster.create if cluster is not None else None
        if bound and create is not None and create.rbac_security_group is None:
            raise ValueError(
                f"RoleBindings name Google Groups ({', '.join(bound)}), which GKE matches only "
                "with Google Groups for RBAC: set gcp.cluster.create.rbac_security_group to "
                "gke-security-groups@<your domain>, with these groups as its members"
            )
        return value

    @field_validator("spot_gpu_quota")
    @classmethod
    def _known_accelerators(cls, value: dict[str, int]) -> dict[str, int]:
        families = catalog("gcp").preemptible_gpu_families
        unknown = sorted(set(value) - set(families))
        if unknown:
            raise ValueError(
                f"unknown accelerator type(s) {unknown}; allowed values: "
                + ", ".join(sorted(families))
            )
        return value
