"""Exposure rules: API endpoints open to networks wider than the threshold (0.0.0.0/0 and its
halves included) are mandatory violations unless waived with an expiry; wildcard principals are
refused.

Input shapes as the engine receives them: EKS `vpcConfig.publicAccessCidrs` (unset = 0.0.0.0/0,
EKS API reference, VpcConfigRequest), GKE `masterAuthorizedNetworksConfig.cidrBlocks[].cidrBlock`
(pulumi-gcp container.Cluster), IAM trust `Principal.AWS`, GCP IAM `member`/`members`.
"""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from pack_copy import pack_copy
from spot_policy_cases import document, resource

from spotctl.preview.analyzer import PolicyAnalyzer

ENDPOINT = "cluster-endpoint-not-internet-open"
PRINCIPAL = "iam-no-wildcard-principal"
EKS = "aws:eks/cluster:Cluster"
GKE = "gcp:container/cluster:Cluster"


def eks(vpc_config: dict):
    return resource(EKS, "open-eks", {"vpcConfig": vpc_config})


def gke(**inputs):
    return resource(GKE, "open-gke", inputs)


def authorized(*cidrs: str) -> dict:
    return {"cidrBlocks": [{"cidrBlock": c, "displayName": "n"} for c in cidrs]}


@pytest.mark.parametrize(
    ("cluster", "opened"),
    [
        (eks({"endpointPublicAccess": True, "publicAccessCidrs": ["0.0.0.0/0"]}), ["0.0.0.0/0"]),
        (
            eks({"endpointPublicAccess": True, "publicAccessCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}),
            ["0.0.0.0/1", "128.0.0.0/1"],
        ),
        (eks({"endpointPublicAccess": True}), ["0.0.0.0/0"]),  # EKS's default
        (eks({"publicAccessCidrs": ["10.0.0.0/8", "198.51.100.0/24"]}), ["10.0.0.0/8"]),
        (eks({"publicAccessCidrs": ["2001:db8::/32"]}), ["2001:db8::/32"]),
        (eks({"endpointPublicAccess": True, "publicAccessCidrs": ["198.51.100.0/24"]}), []),
        (eks({"endpointPublicAccess": False, "endpointPrivateAccess": True}), []),
        (gke(masterAuthorizedNetworksConfig=authorized("0.0.0.0/0")), ["0.0.0.0/0"]),
        (
            gke(masterAuthorizedNetworksConfig=authorized("203.0.113.0/24", "0.0.0.0/1")),
            ["0.0.0.0/1"],
        ),
        (gke(privateClusterConfig={"enablePrivateEndpoint": False}), ["0.0.0.0/0"]),
        (gke(masterAuthorizedNetworksConfig=authorized("203.0.113.0/24")), []),
        (gke(privateClusterConfig={"enablePrivateEndpoint": True}), []),
    ],
)
def test_endpoints_wider_than_the_threshold_are_mandatory(analyzer, cluster, opened):
    report = analyzer.analyze([cluster])
    found = [v for v in report.violations if v.policy == ENDPOINT]
    assert [v.level for v in found] == ["mandatory"] * len(opened)
    for violation, cidr in zip(found, opened, strict=True):
        assert f"opens its API endpoint to {cidr} (" in violation.message


@pytest.mark.parametrize(
    ("principal", "violates"),
    [
        ({"AWS": "arn:aws:iam::111122223333:role/*"}, True),
        ({"AWS": ["arn:aws:iam::111122223333:role/MLEngineers", "*"]}, True),
        ("*", True),
        ({"AWS": "arn:aws:iam::111122223333:role/ML?ngineers"}, True),
        ({"AWS": "arn:aws:iam::111122223333:role/MLEngineers"}, False),
        ({"Service": "pods.eks.amazonaws.com"}, False),
    ],
)
def test_wildcard_principals_in_a_trust_policy_are_refused(violations, principal, violates):
    trust = document({"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"})
    role = resource("aws:iam/role:Role", "vision-engineer", {"assumeRolePolicy": trust})
    found = violations(PRINCIPAL, role)
    assert bool(found) == violates, found
    if violates:
        assert "'vision-engineer' trusts the wildcard principal" in found[0]


@pytest.mark.parametrize(
    ("type_", "inputs", "violates"),
    [
        ("gcp:projects/iAMMember:IAMMember", {"member": "allUsers"}, True),
        ("gcp:projects/iAMMember:IAMMember", {"member": "user:*@example.com"}, True),
        (
            "gcp:storage/bucketIAMBinding:BucketIAMBinding",
            {"members": ["allAuthenticatedUsers"]},
            True,
        ),
        ("gcp:projects/iAMMember:IAMMember", {"member": "group:ml@example.com"}, False),
    ],
)
def test_gcp_grants_to_everyone_are_refused(violations, type_, inputs, violates):
    grant = resource(type_, "grant", {"role": "roles/container.developer", **inputs})
    assert bool(violations(PRINCIPAL, grant)) == violates


def _report_with_waiver(tmp_path, expires: date):
    waivers = (
        f"waivers:\n  - policy: {ENDPOINT}\n    stack: test\n    resource: open-eks\n"
        f"    reason: office egress moving to a new range\n    owner: platform-oncall\n"
        f"    expires: {expires}\n"
    )
    pack = pack_copy(tmp_path / "pack", waivers)
    with PolicyAnalyzer(pack, project="spot-training", stack="test") as running:
        return running.analyze([eks({"publicAccessCidrs": ["0.0.0.0/0"]})])


def test_an_open_endpoint_is_waived_only_until_the_waiver_expires(tmp_path):
    waived = _report_with_waiver(tmp_path / "later", date.today() + timedelta(days=30))
    assert waived.mandatory == []
    (entry,) = waived.waived
    assert f"{ENDPOINT} waived until" in entry.message
    expired = _report_with_waiver(tmp_path / "earlier", date.today() - timedelta(days=1))
    assert {v.policy for v in expired.mandatory} == {ENDPOINT, "waiver-not-expired"}
