"""EC2 Service Quotas requests for GPU vCPUs, spot and on-demand: the ceiling every GPU pool runs
into first. `components.config.capacity` checks that they cover what the pools may launch.

Each quota is read first (`current_vcpus`: the account's applied value, or AWS's default where
none is applied), and a request is filed at most once, for more than that. pulumi-aws's
ServiceQuota (the Terraform provider's `aws_servicequotas_service_quota`) refuses, at creation, a
value below the current one; and once a request closes with less than was asked (a partial
grant), it reads the granted value back, sees a difference and requests again on every
`pulumi up`. So the value it gets is never below the current one, and later differences are
ignored: asking for more later is a deliberate `pulumi up --replace` of that quota
(docs/deploy.md, section 6). Service Quotas allows one open request per quota and refuses a
second (ResourceAlreadyExistsException): a quota whose request is already open, filed by hand
(`aws.open_quota_requests`, found by `spotctl preflight`), gets none from the stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.catalog import catalog

SERVICE = "ec2"
# EC2 quota codes by (capacity, quota family), from the catalog; the quotas count vCPUs.
QUOTA_CODES = {
    (capacity, family): quota.code
    for capacity, families in catalog("aws").quota_families.items()
    for family, quota in families.items()
}
Quota = tuple[str, str]  # (capacity, family)


def current_vcpus(quotas: list[Quota], provider: pulumi.ProviderResource) -> dict[Quota, int]:
    """The vCPUs each quota allows the account now: a data lookup, answered during the preview,
    so that what the first `pulumi up` creates can be checked against it."""
    options = pulumi.InvokeOptions(provider=provider)
    return {
        quota: int(
            aws.servicequotas.get_service_quota(
                service_code=SERVICE, quota_code=QUOTA_CODES[quota], opts=options
            ).value
        )
        for quota in quotas
    }


@dataclass(frozen=True)
class GpuQuotasArgs:
    # (capacity, family) -> vCPUs to request; absent: leave the account's value as it is.
    vcpus: dict[Quota, int] = field(default_factory=dict)
    # (capacity, family) -> vCPUs the account has now (`current_vcpus`), for each requested one.
    current: dict[Quota, int] = field(default_factory=dict)
    # Service Quotas codes whose increase request is already open: none is filed for them.
    open_requests: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for key, value in self.vcpus.items():
            if key not in QUOTA_CODES:
                raise ValueError(f"GpuQuotasArgs.vcpus: unknown quota {key}")
            if value < 1:
                raise ValueError(f"GpuQuotasArgs.vcpus[{key}]: must be at least 1 vCPU")
            if key not in self.current:
                raise ValueError(f"GpuQuotasArgs.current: no current value of {key}")


class GpuQuotas(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: GpuQuotasArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:quotas:GpuQuotas", name, None, opts)
        for (capacity, family), vcpus in sorted(args.vcpus.items()):
            if QUOTA_CODES[(capacity, family)] in args.open_requests:
                continue
            aws.servicequotas.ServiceQuota(
                f"{name}-{capacity}-{family}",
                service_code=SERVICE,
                quota_code=QUOTA_CODES[(capacity, family)],
                # Equal to the current value where the account already has enough: no request.
                value=max(vcpus, args.current[(capacity, family)]),
                opts=pulumi.ResourceOptions(parent=self, ignore_changes=["value"]),
            )
        self.register_outputs({})
