"""A first `pulumi up` on an empty AWS account: nothing it creates needs a quota the same run
requests, quota requests tolerate what the account already has, and every person the stack's
roles trust is a role or user that exists. Each refusal is one line naming the field, exit 2."""

from __future__ import annotations

import copy
import subprocess

import pulumi
import pytest
from dependency_graph import DependencyGraph
from stack_files import spotctl_preview, stack_values

from components.aws.quotas import QUOTA_CODES, GpuQuotas, GpuQuotasArgs
from components.aws.spot_role import (
    SPOT_ROLE,
    SPOT_SERVICE,
    SpotServiceRole,
    SpotServiceRoleArgs,
)
from components.config import ConfigError, load_config
from components.config.capacity import creation_problems, starting_gpu_vcpus
from spotctl.preview.aws import ACCOUNT_ID

ON_DEMAND_G = ("on-demand", "g-family")


def one_config_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "spot-training:" in line]
    return line.strip()


# --- quotas


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        if args.typ == "aws:servicequotas/serviceQuota:ServiceQuota":
            self.values[args.inputs["quotaCode"]] = args.inputs["value"]
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


@pytest.mark.parametrize(
    ("requested", "current", "filed"),
    [
        (768, 0, 768),  # a new account: the request as configured
        (768, 1024, 1024),  # already higher: no request (the provider refuses a lower one)
        (768, 500, 768),  # a partial grant so far: the request stands, filed once
    ],
)
def test_a_quota_request_is_never_below_what_the_account_has(requested, current, filed):
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, preview=False)

    @pulumi.runtime.test
    def build():
        GpuQuotas(
            "q", GpuQuotasArgs(vcpus={ON_DEMAND_G: requested}, current={ON_DEMAND_G: current})
        )
        return pulumi.Output.from_input(None)

    build()
    assert mocks.values == {QUOTA_CODES[ON_DEMAND_G]: filed}


def test_no_request_is_filed_for_a_quota_whose_request_is_already_open():
    """Service Quotas allows one open request per quota: a second one is refused with
    ResourceAlreadyExistsException, so a quota requested by hand (docs/deploy.md asks for them
    early) gets none from the stack; the others still do."""
    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, preview=False)
    spot_g = ("spot", "g-family")

    @pulumi.runtime.test
    def build():
        GpuQuotas(
            "q",
            GpuQuotasArgs(
                vcpus={ON_DEMAND_G: 768, spot_g: 512},
                current={ON_DEMAND_G: 0, spot_g: 0},
                open_requests=frozenset({QUOTA_CODES[ON_DEMAND_G]}),
            ),
        )
        return pulumi.Output.from_input(None)

    build()
    assert mocks.values == {QUOTA_CODES[spot_g]: 512}


def test_open_quota_requests_name_quotas_of_the_catalog():
    values = copy.deepcopy(stack_values("prod"))
    values["aws"]["open_quota_requests"] = [QUOTA_CODES[ON_DEMAND_G]]
    assert load_config(values).aws.open_quota_requests == [QUOTA_CODES[ON_DEMAND_G]]
    values["aws"]["open_quota_requests"] = ["L-1216C47A"]  # a CPU quota: the stack files none
    with pytest.raises(ConfigError) as caught:
        load_config(values)
    ((path, message),) = caught.value.problems
    assert path == "aws.open_quota_requests" and "L-1216C47A" in message


def test_what_exists_at_creation_is_checked_against_the_quota_now():
    prod = load_config(stack_values("prod"))
    # The repository's prod buffer starts empty; its schedule grows it.
    assert prod.aws.pools.buffer.desired_size == 0
    assert starting_gpu_vcpus(prod) == {} and creation_problems(prod, {}) == []
    values = copy.deepcopy(stack_values("prod"))
    values["aws"]["pools"]["buffer"]["desired_size"] = 2
    started = load_config(values)
    # 2 x g6e.12xlarge (48 vCPUs each, components/catalog.yaml).
    assert starting_gpu_vcpus(started) == {ON_DEMAND_G: 96}
    assert creation_problems(started, {ON_DEMAND_G: 96}) == []
    ((path, message),) = creation_problems(started, {ON_DEMAND_G: 64})
    assert path == "aws.pools.buffer.desired_size"
    assert "96 G-family on-demand vCPUs" in message and "allows 64" in message


def test_cli_refuses_a_gpu_buffer_that_starts_above_the_accounts_quota(program_copy):
    values = copy.deepcopy(stack_values("prod"))
    values["aws"]["pools"]["buffer"]["desired_size"] = 2
    line = one_config_line(spotctl_preview(program_copy("prod", values), "prod"))
    assert line.startswith("spot-training:aws.pools.buffer.desired_size: 2 GPU nodes at creation")
    assert "allows 0 now" in line and "start the buffer at 0" in line


# --- principals


@pytest.mark.parametrize(
    "arn",
    [
        "*",
        "arn:aws:iam::111122223333:root",
        "arn:aws:iam::111122223333:group/Admins",
        "arn:aws:sts::111122223333:assumed-role/Admins/alice",
        "arn:aws:iam::1111:role/Admins",
        "arn:aws:iam::111122223333:role/",
    ],
)
def test_a_principal_must_be_a_role_or_user_arn(arn):
    values = copy.deepcopy(stack_values("dev"))
    values["aws"]["principals"]["log_reader"] = [arn]
    with pytest.raises(ConfigError) as caught:
        load_config(values)
    ((path, message),) = caught.value.problems
    assert path == "aws.principals.log_reader[0]"
    assert message.startswith(f"{arn!r} is not an IAM role or user ARN")


def test_roles_and_users_with_paths_are_principals():
    values = copy.deepcopy(stack_values("dev"))
    values["aws"]["principals"]["log_reader"] = [
        "arn:aws:iam::111122223333:role/teams/ml/Auditors",
        "arn:aws:iam::111122223333:user/alice@example.com",
    ]
    config = load_config(values)
    assert ("aws.principals.log_reader[1]", "arn:aws:iam::111122223333:user/alice@example.com") in (
        config.trusted_principals()
    )


def test_cli_refuses_a_principal_of_the_account_that_does_not_exist(program_copy):
    """The preview's account is an empty one: IAM's lookup finds no such role."""
    values = copy.deepcopy(stack_values("dev"))
    values["teams"][0]["engineers"] = [f"arn:aws:iam::{ACCOUNT_ID}:role/MLEngineers"]
    line = one_config_line(spotctl_preview(program_copy("dev", values), "dev"))
    assert line.startswith(
        f"spot-training:teams[0].engineers[0]: no role 'MLEngineers' in account {ACCOUNT_ID}"
    )
    assert "cannot be found" in line and "create it first" in line


# --- the EC2 Spot service-linked role


class SpotRoleMocks(pulumi.runtime.Mocks):
    """An account as IAM answers `get-role AWSServiceRoleForEC2Spot`: `found` or not."""

    def __init__(self, answer) -> None:
        self.answer, self.created = answer, []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.created.append((args.typ, args.inputs))
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        assert args.token == "aws:iam/getRole:getRole" and args.args["name"] == SPOT_ROLE
        return self.answer


USED_ACCOUNT = {
    "name": SPOT_ROLE,
    "arn": f"arn:aws:iam::{ACCOUNT_ID}:role/aws-service-role/{SPOT_SERVICE}/{SPOT_ROLE}",
    "id": SPOT_ROLE,
}
# IAM's answer in an account that never ran Spot, as the provider fails the lookup.
EMPTY_ACCOUNT = ({}, [("name", f"NoSuchEntity: The role with name {SPOT_ROLE} cannot be found.")])


def spot_role_in(answer) -> list:
    mocks = SpotRoleMocks(answer)
    pulumi.runtime.set_mocks(mocks, preview=False)

    @pulumi.runtime.test
    def build():
        SpotServiceRole("spot-role", SpotServiceRoleArgs(tags={"env": "dev"}))
        return pulumi.Output.from_input(None)

    build()
    return [(typ, inputs) for typ, inputs in mocks.created if not typ.startswith("spot:")]


def test_the_spot_service_linked_role_is_created_only_where_the_account_lacks_it():
    """EC2 creates it on a first Spot request only for a caller that may, and Karpenter may not:
    every spot NodeClaim would fail with ServiceLinkedRoleCreationNotPermitted (Karpenter's
    getting-started step, shared/schemas/karpenter-v1.14.1/step06-add-spot-role.sh). An account
    has one: where it exists, declaring it again would fail (`InvalidInput: ... has been
    taken`)."""
    assert spot_role_in(EMPTY_ACCOUNT) == [
        (
            "aws:iam/serviceLinkedRole:ServiceLinkedRole",
            {"awsServiceName": SPOT_SERVICE, "tags": {"env": "dev"}},
        )
    ]
    assert spot_role_in(USED_ACCOUNT) == []


def test_a_refused_spot_role_lookup_stops_the_run():
    denied = ({}, [("name", "AccessDenied: not authorized to perform: iam:GetRole")])
    with pytest.raises(Exception, match="AccessDenied"):
        spot_role_in(denied)


def test_karpenter_waits_for_the_spot_role_on_a_new_account(prod_preview):
    """The preview's account is a new one: the role is created, and Karpenter, whose spot
    launches need it, is installed after it."""
    (role,) = [r for r in prod_preview if r.type == "aws:iam/serviceLinkedRole:ServiceLinkedRole"]
    assert role.inputs["awsServiceName"] == SPOT_SERVICE
    (karpenter,) = [
        r
        for r in prod_preview
        if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs["name"] == "karpenter"
    ]
    assert DependencyGraph(prod_preview).waits_for(karpenter, role)
