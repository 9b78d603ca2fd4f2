"""A customer-managed encryption key (CMEK) that rotates, usable by one Google service agent."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

DAY_SECONDS = 86400
KEY_USER_ROLE = "roles/cloudkms.cryptoKeyEncrypterDecrypter"


@dataclass(frozen=True)
class ServiceKeyArgs:
    project: str
    location: str
    agent_member: pulumi.Input[str]  # "serviceAccount:service-<number>@..." of the service
    rotation_days: int = 90
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.rotation_days <= 365:
            raise ValueError("ServiceKeyArgs.rotation_days: between 1 and 365")


class ServiceKey(pulumi.ComponentResource):
    id: pulumi.Output[str]
    # Depend on this before the service first encrypts with the key.
    grant: pulumi.Resource

    def __init__(
        self, name: str, args: ServiceKeyArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:ServiceKey", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ring = gcp.kms.KeyRing(
            f"{name}-ring", project=args.project, location=args.location, opts=child
        )
        # A destroyed key makes everything encrypted with it unreadable: keep it out of
        # `pulumi destroy`.
        key = gcp.kms.CryptoKey(
            f"{name}-key",
            key_ring=ring.id,
            purpose="ENCRYPT_DECRYPT",
            rotation_period=f"{args.rotation_days * DAY_SECONDS}s",
            labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        self.grant = gcp.kms.CryptoKeyIAMMember(
            f"{name}-agent",
            crypto_key_id=key.id,
            role=KEY_USER_ROLE,
            member=args.agent_member,
            opts=child,
        )
        self.id = key.id
        self.register_outputs({"id": self.id})
