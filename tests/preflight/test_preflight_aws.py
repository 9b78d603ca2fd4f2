"""`spotctl preflight` on AWS: each check's pass and fail against botocore's Stubber (AWS's own
request and response shapes, checked by botocore), a refused call as one cannot-check row,
missing credentials as one line, and only reading calls."""

from __future__ import annotations

import copy
import os
import subprocess
from datetime import datetime

import boto3
import pytest
from botocore.stub import ANY, Stubber
from stack_files import REPO_ROOT, SPOTCTL, stack_values

from components.catalog import catalog
from components.config import load_config
from components.versions import KUBERNETES_RELEASES
from spotctl.preflight import aws
from spotctl.preflight.rows import CANNOT_CHECK, FAIL, PASS, PreflightError, run_checks

DEV = load_config(stack_values("dev"))
ACCOUNT = "123456789012"
CALLER = f"arn:aws:sts::{ACCOUNT}:assumed-role/Deployer/session"
DEPLOYER = f"arn:aws:iam::{ACCOUNT}:role/ci/Deployer"
# Each call the checks make, as IAM names the action: what `spotctl preflight` says it calls.
READS = ("Get", "List", "Describe", "Head", "Simulate")


class Account:
    """boto3 clients whose answers the test queues, per service, in the order they are asked."""

    def __init__(self) -> None:
        self.session = boto3.session.Session(
            aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-1"
        )
        self.stubs: dict[str, Stubber] = {}

    def _stub(self, service: str) -> Stubber:
        if service not in self.stubs:
            self.stubs[service] = Stubber(self.session.client(service))
            self.stubs[service].activate()
        return self.stubs[service]

    def __call__(self, service: str):
        return self._stub(service).client

    def answer(self, service: str, operation: str, response: dict, params=None) -> Account:
        self._stub(service).add_response(operation, response, params)
        return self

    def refuse(self, service: str, operation: str, code: str, status: int = 400) -> Account:
        self._stub(service).add_client_error(
            operation,
            service_error_code=code,
            service_message=f"{code} here",
            http_status_code=status,
        )
        return self

    def all_asked(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()


def run(check: str, account: Account, settings=DEV, stack: str = "dev"):
    (found,) = [c for c in aws.checks(settings, stack, account) if c.name == check]
    rows = run_checks([found], aws.refused)
    account.all_asked()
    return rows


def identity(account: Account) -> Account:
    return account.answer(
        "sts", "get_caller_identity", {"Account": ACCOUNT, "Arn": CALLER, "UserId": "AROA:session"}
    )


# --- identity and region


def test_identity_passes_with_working_credentials():
    (row,) = run("identity", identity(Account()))
    assert row.status == PASS and ACCOUNT in row.detail and CALLER in row.detail


def test_expired_credentials_are_one_line():
    account = Account().refuse("sts", "get_caller_identity", "ExpiredToken", 403)
    with pytest.raises(PreflightError) as caught:
        run("identity", account)
    assert str(caught.value) == "AWS refuses these credentials: ExpiredToken: ExpiredToken here"


def zones(names, state="available"):
    return {
        "AvailabilityZones": [
            {"ZoneName": z, "State": state, "RegionName": "us-east-1"} for z in names
        ]
    }


def test_region_passes_when_the_stack_zones_are_available():
    account = Account().answer(
        "ec2", "describe_availability_zones", zones(DEV.zones), {"ZoneNames": DEV.zones}
    )
    (row,) = run("region", account)
    assert row.status == PASS


@pytest.mark.parametrize(
    ("code", "expected", "fix"),
    [
        ("InvalidParameterValue", "InvalidParameterValue here", "describe-availability-zones"),
        ("OptInRequired", "us-east-1 is not enabled for account", "aws account enable-region"),
    ],
)
def test_a_wrong_region_is_one_failing_row(code, expected, fix):
    account = Account() if code == "InvalidParameterValue" else identity(Account())
    account.refuse("ec2", "describe_availability_zones", code)
    (row,) = run("region", account)
    assert row.status == FAIL and expected in row.detail and fix in row.fix


# --- the EC2 Spot service-linked role


def test_spot_role_passes_where_it_exists():
    account = Account().answer(
        "iam", "get_role", role("AWSServiceRoleForEC2Spot"), {"RoleName": aws.SPOT_ROLE}
    )
    (row,) = run("spot-service-role", account)
    assert row.status == PASS and "exists" in row.detail


def role(name: str, arn: str | None = None) -> dict:
    return {
        "Role": {
            "Path": "/",
            "RoleName": name,
            "RoleId": "AROAEXAMPLEEXAMPLE123",
            "Arn": arn or f"arn:aws:iam::{ACCOUNT}:role/{name}",
            "CreateDate": datetime(2026, 1, 1),
        }
    }


@pytest.mark.parametrize(("decision", "status"), [("allowed", PASS), ("implicitDeny", FAIL)])
def test_an_absent_spot_role_passes_only_if_the_deployer_may_create_it(decision, status):
    account = identity(Account())
    account.refuse("iam", "get_role", "NoSuchEntity", 404)
    account.answer("iam", "get_role", role("Deployer", DEPLOYER), {"RoleName": "Deployer"})
    account.answer(
        "iam",
        "simulate_principal_policy",
        {
            "EvaluationResults": [
                {"EvalActionName": "iam:CreateServiceLinkedRole", "EvalDecision": decision}
            ]
        },
        {
            "PolicySourceArn": DEPLOYER,
            "ActionNames": ["iam:CreateServiceLinkedRole"],
            "ContextEntries": ANY,
        },
    )
    (row,) = run("spot-service-role", account)
    assert row.status == status
    if status == FAIL:
        assert "ServiceLinkedRoleCreationNotPermitted" in row.detail
        assert row.fix.startswith("aws iam create-service-linked-role --aws-service-name spot")


# --- quotas: the catalog's code, confirmed by its name; value against need; open requests


def quota(capacity: str, family: str, value: float, name: str | None = None) -> dict:
    known = catalog("aws").quota_families[capacity][family]
    return {
        "Quota": {
            "ServiceCode": "ec2",
            "QuotaCode": known.code,
            "QuotaName": name or known.name,
            "Value": value,
        }
    }


def history(*requests: tuple[str, float]) -> dict:
    return {
        "RequestedQuotas": [
            {"Status": status, "DesiredValue": value, "QuotaCode": "L-X"}
            for status, value in requests
        ]
    }


def quota_rows(answers: dict, settings=DEV) -> list:
    """dev requests on-demand G 32 and spot G 64 vCPUs (asked in that order)."""
    account = Account()
    for capacity in ("on-demand", "spot"):
        value, requests, name = answers[capacity]
        account.answer(
            "service-quotas", "get_service_quota", quota(capacity, "g-family", value, name)
        )
        if name is None:  # a quota of another name is refused before its requests are read
            account.answer(
                "service-quotas",
                "list_requested_service_quota_change_history_by_quota",
                history(*requests),
            )
    return run("quotas", account, settings)


def test_quotas_pass_when_the_account_has_enough():
    rows = quota_rows({"on-demand": (32, (), None), "spot": (64, (), None)})
    assert [r.status for r in rows] == [PASS, PASS]
    assert rows[1].detail == "All G and VT Spot Instance Requests: 64 of 64 vCPUs"


def test_a_quota_code_whose_name_is_another_quotas_fails():
    rows = quota_rows(
        {"on-demand": (32, (), None), "spot": (64, (), "All P4, P3 and P2 Spot Instance Requests")}
    )
    assert rows[1].status == FAIL and "components/catalog.yaml" in rows[1].fix


def test_an_open_request_the_stack_does_not_know_of_fails():
    """Service Quotas allows one open request per quota: the stack's own would be refused."""
    rows = quota_rows({"on-demand": (0, (("CASE_OPENED", 32),), None), "spot": (64, (), None)})
    assert rows[0].status == FAIL and "a request for 32 is open (CASE_OPENED)" in rows[0].detail
    assert rows[0].fix == "add L-DB2E81BA to aws.open_quota_requests in stacks/Pulumi.dev.yaml"


def test_an_open_request_listed_in_the_config_passes_and_one_not_open_fails():
    values = copy.deepcopy(stack_values("dev"))
    values["aws"]["open_quota_requests"] = ["L-DB2E81BA", "L-3819A6DF"]
    listed = load_config(values)
    rows = quota_rows(
        {"on-demand": (0, (("PENDING", 32),), None), "spot": (0, (("DENIED", 64),), None)}, listed
    )
    assert rows[0].status == PASS and "your request for 32 is open" in rows[0].detail
    assert rows[1].status == FAIL and rows[1].fix.startswith("remove L-3819A6DF from")


def test_a_quota_below_need_with_no_request_passes_since_the_stack_files_it():
    rows = quota_rows({"on-demand": (0, (("APPROVED", 8),), None), "spot": (64, (), None)})
    assert rows[0].status == PASS and "`pulumi up` requests 32" in rows[0].detail


# --- instance types offered in the pools' zones


def offerings(pairs) -> dict:
    return {
        "InstanceTypeOfferings": [
            {"InstanceType": t, "LocationType": "availability-zone", "Location": z}
            for t, z in pairs
        ]
    }


def test_offerings_pass_where_every_type_is_offered_in_a_zone_and_fail_where_one_is_not():
    gpu = DEV.gpu_classes[0]
    account = Account()
    # g5.4xlarge offered nowhere in the class's zones.
    account.answer(
        "ec2",
        "describe_instance_type_offerings",
        offerings([(t, z) for t in gpu.instance_types[:2] for z in DEV.zones]),
    )
    account.answer(
        "ec2", "describe_instance_type_offerings", offerings([("m6i.large", DEV.zones[0])])
    )
    gpu_row, stable_row = run("offerings", account)
    assert gpu_row.status == FAIL and "['g5.4xlarge'] offered in none" in gpu_row.detail
    assert "Values=g5.4xlarge" in gpu_row.fix
    assert stable_row.status == PASS and stable_row.detail == "m6i.large in 1/2"


# --- add-on builds for the cluster's Kubernetes version


def test_addons_pass_when_offered_and_fail_when_not():
    release = KUBERNETES_RELEASES[DEV.aws.cluster.create.version]
    account = Account()
    names = sorted(release.addons)
    for name in names:
        offered = [] if name == "amazon-cloudwatch-observability" else [release.addons[name]]
        account.answer(
            "eks",
            "describe_addon_versions",
            {
                "addons": [
                    {"addonName": name, "addonVersions": [{"addonVersion": v} for v in offered]}
                ]
            },
            {"addonName": name, "kubernetesVersion": release.version},
        )
    rows = {row.check: row for row in run("addons", account)}
    assert rows["addon amazon-cloudwatch-observability"].status == FAIL
    assert "components/versions.py" in rows["addon amazon-cloudwatch-observability"].fix
    assert [r.status for n, r in rows.items() if "cloudwatch" not in n] == [PASS] * (len(names) - 1)


# --- the bucket name


def named_bucket():
    values = copy.deepcopy(stack_values("dev"))
    values["aws"].setdefault("checkpoint_storage", {})["bucket_name"] = "acme-checkpoints-dev"
    return load_config(values)


@pytest.mark.parametrize(("code", "status"), [("404", PASS), ("403", FAIL)])
def test_a_fixed_bucket_name_passes_only_when_free(code, status):
    account = Account().refuse("s3", "head_bucket", code, int(code))
    (row,) = run("bucket", account, named_bucket())
    assert row.status == status
    if status == FAIL:
        assert "another account" in row.detail and "bucket_name" in row.fix


# --- refusals, and only reads


def test_a_denied_call_is_one_cannot_check_row():
    account = Account().refuse("iam", "get_role", "AccessDenied", 403)
    (row,) = run("spot-service-role", account)
    assert row.status == CANNOT_CHECK
    assert row.detail == "GetRole denied (AccessDenied): grant it to run this check"


def test_every_call_it_says_it_makes_only_reads():
    calls = [call for check in aws.checks(DEV, "dev", Account()) for call in check.calls]
    assert calls and all(call.split(":")[1].startswith(READS) for call in calls)


def test_missing_credentials_are_one_line_and_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        HOME=str(tmp_path),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    result = subprocess.run(
        [SPOTCTL, "preflight", "--stack", "dev", "--program", str(REPO_ROOT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: no AWS credentials: `aws configure sso` / `aws sso login`, or set AWS_PROFILE"
    ]
