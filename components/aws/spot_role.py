"""The EC2 Spot service-linked role (`AWSServiceRoleForEC2Spot`), through which EC2 launches Spot
Instances. EC2 creates it on an account's first Spot request only if the caller may create it;
Karpenter's controller may not, so on a new account every spot NodeClaim fails with
ServiceLinkedRoleCreationNotPermitted, which is no capacity error: the on-demand fallback never
starts. Karpenter's getting-started guide creates it first (`aws iam create-service-linked-role
--aws-service-name spot.amazonaws.com`).

An account has one, shared by everything that runs Spot there. So every run looks it up and
declares it only where it is absent, and the stack never deletes it (`retain_on_delete`): the
run after the one that created it finds it and lets go of it, and `pulumi destroy` leaves it to
the account's other Spot users.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

SPOT_SERVICE = "spot.amazonaws.com"
SPOT_ROLE = "AWSServiceRoleForEC2Spot"


@dataclass(frozen=True)
class SpotServiceRoleArgs:
    tags: dict[str, str] = field(default_factory=dict)


class SpotServiceRole(pulumi.ComponentResource):
    """The role where the account lacks it (`role`); nothing where it has it (`role` None)."""

    role: aws.iam.ServiceLinkedRole | None

    def __init__(
        self, name: str, args: SpotServiceRoleArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:iam:SpotServiceRole", name, None, opts)
        self.role = None
        if not self._exists():
            self.role = aws.iam.ServiceLinkedRole(
                f"{name}-role",
                aws_service_name=SPOT_SERVICE,
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
        self.register_outputs({})

    def _exists(self) -> bool:
        """A data lookup (`aws iam get-role`), answered during the preview and again by `pulumi
        up`. Only IAM's NoSuchEntity means absent; any other failure (a denied lookup) stops the
        run rather than create a role that may exist."""
        try:
            aws.iam.get_role(name=SPOT_ROLE, opts=pulumi.InvokeOptions(parent=self))
        except Exception as exc:
            if "NoSuchEntity" in str(exc):
                return False
            raise
        return True
