"""EC2 Service Quotas requests for GPU vCPUs, spot and on-demand: the ceiling every GPU pool runs
into first. `components.capacity` checks that they cover what the pools may launch."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

# EC2 quota codes by (capacity, instance family group); the quotas count vCPUs.
QUOTA_CODES = {
    ("spot", "p-family"): "L-7212CCBC",  # All P Spot Instance Requests
    ("spot", "g-family"): "L-3819A6DF",  # All G and VT Spot Instance Requests
    ("on-demand", "p-family"): "L-417A185B",  # Running On-Demand P instances
    ("on-demand", "g-family"): "L-DB2E81BA",  # Running On-Demand G and VT instances
}


@dataclass(frozen=True)
class GpuQuotasArgs:
    # (capacity, family) -> vCPUs to request; absent: leave the account's value as it is.
    vcpus: dict[tuple[str, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, value in self.vcpus.items():
            if key not in QUOTA_CODES:
                raise ValueError(f"GpuQuotasArgs.vcpus: unknown quota {key}")
            if value < 1:
                raise ValueError(f"GpuQuotasArgs.vcpus[{key}]: must be at least 1 vCPU")


class GpuQuotas(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: GpuQuotasArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:quotas:GpuQuotas", name, None, opts)
        for (capacity, family), vcpus in sorted(args.vcpus.items()):
            aws.servicequotas.ServiceQuota(
                f"{name}-{capacity}-{family}",
                service_code="ec2",
                quota_code=QUOTA_CODES[(capacity, family)],
                value=vcpus,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({})
