"""EC2 Service Quotas requests for spot GPU vCPUs (the ceiling every spot pool runs into first)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

# EC2 quota codes, per spot instance family.
SPOT_QUOTA_CODES = {
    "p-family": "L-7212CCBC",  # All P Spot Instance Requests (vCPUs)
    "g-family": "L-3819A6DF",  # All G and VT Spot Instance Requests (vCPUs)
}


@dataclass(frozen=True)
class SpotGpuQuotasArgs:
    p_family_vcpus: int | None = None
    g_family_vcpus: int | None = None

    def __post_init__(self) -> None:
        for attr in ("p_family_vcpus", "g_family_vcpus"):
            value = getattr(self, attr)
            if value is not None and value < 1:
                raise ValueError(f"SpotGpuQuotasArgs.{attr}: must be at least 1 vCPU")


class SpotGpuQuotas(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: SpotGpuQuotasArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:quotas:SpotGpuQuotas", name, None, opts)
        requested = {"p-family": args.p_family_vcpus, "g-family": args.g_family_vcpus}
        for family, vcpus in requested.items():
            if vcpus is None:
                continue
            aws.servicequotas.ServiceQuota(
                f"{name}-{family}",
                service_code="ec2",
                quota_code=SPOT_QUOTA_CODES[family],
                value=vcpus,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({})
