"""Cloud Quotas preferences for what the Spot pools run into first: the preemptible GPUs of each
accelerator in the stack's region, and the project's all-regions ceilings on GPUs and vCPUs that
every new project starts low (GPUS-ALL-REGIONS at 0 or 1, CPUS-ALL-REGIONS below one
a3-highgpu-8g), sized from the pools' maxima."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pulumi
import pulumi_gcp as gcp

from components.catalog import catalog

if TYPE_CHECKING:
    from components.config import StackConfig

# Compute Engine's project-wide quotas, over every region, Spot capacity included.
ALL_REGIONS_GPUS = "GPUS-ALL-REGIONS-per-project"
ALL_REGIONS_CPUS = "CPUS-ALL-REGIONS-per-project"


def preemptible_gpu_quota_id(accelerator: str) -> str:
    """Compute Engine's quota id for Spot GPUs of this accelerator type, per region."""
    family = catalog("gcp").preemptible_gpu_families[accelerator]
    return f"PREEMPTIBLE-NVIDIA-{family}-GPUS-per-project-region"


def all_regions_needs(settings: StackConfig) -> dict[str, int]:
    """GPUs and vCPUs the stack's pools may run at their maxima: each GPU class's spot and
    on-demand GPUs (at the most vCPUs per GPU of its machine types, whichever the autoscaler
    picks), the stable pool and the buffer at their largest."""
    machines = catalog("gcp").instance_types
    gpus = vcpus = 0
    for gpu_class in settings.gpu_classes:
        count = gpu_class.spot_gpus + gpu_class.on_demand_gpus
        gpus += count
        vcpus += math.ceil(count * max(machines[t].vcpus_per_gpu for t in gpu_class.instance_types))
    stable = settings.gcp.stable_pool
    vcpus += stable.max_nodes_per_zone * len(settings.zones) * machines[stable.machine_type].vcpus
    buffer = settings.gcp.buffer_pool
    if buffer is not None:
        machine = machines[buffer.machine_type]
        nodes = max(a.nodes_per_zone for a in buffer.schedule) * len(
            buffer.pool_zones(settings.zones)
        )
        gpus += nodes * machine.gpus
        vcpus += nodes * machine.vcpus
    return {ALL_REGIONS_GPUS: gpus, ALL_REGIONS_CPUS: vcpus}


@dataclass(frozen=True)
class SpotGpuQuotasArgs:
    project: str
    region: str
    gpus: dict[str, int] = field(default_factory=dict)  # accelerator type -> GPUs
    # Quota id -> value, project-wide (no region).
    all_regions: dict[str, int] = field(default_factory=dict)
    contact_email: str | None = None

    def __post_init__(self) -> None:
        families = catalog("gcp").preemptible_gpu_families
        for accelerator, count in self.gpus.items():
            if accelerator not in families:
                raise ValueError(
                    f"SpotGpuQuotasArgs.gpus: unknown accelerator type {accelerator!r}; allowed "
                    f"values: {', '.join(sorted(families))}"
                )
            if count < 1:
                raise ValueError(f"SpotGpuQuotasArgs.gpus[{accelerator!r}]: at least 1 GPU")
        for quota_id, count in self.all_regions.items():
            if quota_id not in (ALL_REGIONS_GPUS, ALL_REGIONS_CPUS) or count < 1:
                raise ValueError(
                    f"SpotGpuQuotasArgs.all_regions[{quota_id!r}]: {count} is not a positive "
                    f"value of {ALL_REGIONS_GPUS} or {ALL_REGIONS_CPUS}"
                )
        if (self.gpus or self.all_regions) and not self.contact_email:
            raise ValueError(
                "SpotGpuQuotasArgs.contact_email: Google asks someone about a quota increase"
            )


class SpotGpuQuotas(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: SpotGpuQuotasArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:SpotGpuQuotas", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        for accelerator, count in sorted(args.gpus.items()):
            gcp.cloudquota.SQuotaPreference(
                f"{name}-{accelerator}",
                parent=f"projects/{args.project}",
                service="compute.googleapis.com",
                quota_id=preemptible_gpu_quota_id(accelerator),
                dimensions={"region": args.region},
                quota_config={"preferred_value": str(count)},
                contact_email=args.contact_email,
                justification=f"Spot GPU training capacity ({accelerator}) in {args.region}",
                opts=child,
            )
        for quota_id, count in sorted(args.all_regions.items()):
            gcp.cloudquota.SQuotaPreference(
                f"{name}-{quota_id.removesuffix('-per-project').lower()}",
                parent=f"projects/{args.project}",
                service="compute.googleapis.com",
                quota_id=quota_id,
                quota_config={"preferred_value": str(count)},
                contact_email=args.contact_email,
                justification="GPU training node pools at their maxima, Spot and on-demand",
                opts=child,
            )
        self.register_outputs({})
