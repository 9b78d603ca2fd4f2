"""The `kubernetes` section of the stack config, cloud-neutral: the spot pods' notice, Kueue, the
teams' Job templates and the GPU-hour prices the monitoring stack costs runs at."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal, NamedTuple

from pydantic import Field, field_validator, model_validator

from components.config.schema import (
    DNS_LABEL,
    DURATION,
    Model,
    NonNegativeInt,
    PositiveInt,
    duration_seconds,
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


AdmissionMode = Literal["Audit", "Warn", "Deny"]


class AdmissionWaiver(Model):
    """One team namespace let off one admission rule until a date: the fields of the policy
    pack's waivers.yaml, for a namespace instead of a stack's resource."""

    rule: str = Field(pattern=DNS_LABEL, description="An admission rule (docs/kubernetes.md).")
    namespace: str = Field(pattern=DNS_LABEL, description="The team namespace it covers.")
    reason: str = Field(min_length=1)
    owner: str = Field(min_length=1)
    expires: date = Field(description="The last day it holds; past it the rule applies again.")

    def active(self, today: date) -> bool:
        return today <= self.expires


class AdmissionConfig(Model):
    """The ValidatingAdmissionPolicies in the team namespaces (components/k8s/admission.py)."""

    mode: AdmissionMode = Field(
        default="Warn",
        description="Audit: a breach is admitted and recorded in the API server's audit log; "
        "Warn: admitted, with a warning to the client and an audit entry; Deny: refused. Start "
        "with Warn, switch a team to Deny after a week without warnings.",
    )
    namespace_modes: dict[Annotated[str, Field(pattern=DNS_LABEL)], AdmissionMode] = Field(
        default_factory=dict, description="Team namespaces whose mode differs from `mode`."
    )
    waivers: list[AdmissionWaiver] = Field(
        default_factory=list,
        description="A waived rule only warns in its namespace, until the waiver expires (at "
        "the next `pulumi up` after that day).",
    )

    def mode_of(self, namespace: str) -> AdmissionMode:
        return self.namespace_modes.get(namespace, self.mode)

    def waived(self, namespace: str, today: date) -> dict[str, AdmissionWaiver]:
        """Rule -> the unexpired waiver that lets this namespace off it."""
        return {w.rule: w for w in self.waivers if w.namespace == namespace and w.active(today)}


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
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)

    def notice_for(self, cloud: str) -> int:
        return self.notice_seconds or NOTICE_SECONDS[cloud]

    def notice_lag_for(self, cloud: str) -> int:
        if self.notice_lag_seconds is None:
            return NOTICE_LAG_SECONDS[cloud]
        return self.notice_lag_seconds
