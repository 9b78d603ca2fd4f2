"""Cloud Quotas preferences for preemptible GPUs in the stack's region: the ceiling every Spot
pool runs into first."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.gcp.config import PREEMPTIBLE_GPU_FAMILY


def preemptible_gpu_quota_id(accelerator: str) -> str:
    """Compute Engine's quota id for Spot GPUs of this accelerator type, per region."""
    return f"PREEMPTIBLE-NVIDIA-{PREEMPTIBLE_GPU_FAMILY[accelerator]}-GPUS-per-project-region"


@dataclass(frozen=True)
class SpotGpuQuotasArgs:
    project: str
    region: str
    gpus: dict[str, int] = field(default_factory=dict)  # accelerator type -> GPUs
    contact_email: str | None = None

    def __post_init__(self) -> None:
        for accelerator, count in self.gpus.items():
            if accelerator not in PREEMPTIBLE_GPU_FAMILY:
                raise ValueError(
                    f"SpotGpuQuotasArgs.gpus: unknown accelerator type {accelerator!r}; allowed "
                    f"values: {', '.join(sorted(PREEMPTIBLE_GPU_FAMILY))}"
                )
            if count < 1:
                raise ValueError(f"SpotGpuQuotasArgs.gpus[{accelerator!r}]: at least 1 GPU")
        if self.gpus and not self.contact_email:
            raise ValueError(
                "SpotGpuQuotasArgs.contact_email: Google asks someone about a quota increase"
            )


class SpotGpuQuotas(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: SpotGpuQuotasArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:SpotGpuQuotas", name, None, opts)
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
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({})
