"""The pack's verdict on the GCP stacks: clean as built, and each GCP rule catches the stack's own
resources once they are broken."""

from __future__ import annotations

import dataclasses

import pytest
from spot_policy_cases import PACK_DIR, resource
from stack_files import GCP_STACKS, REPO_ROOT, stack_values

from components.config import load_config
from spotctl.preview.analyzer import check_preview
from spotctl.preview.resources import preview_program


@pytest.fixture(scope="module", params=GCP_STACKS)
def gcp_preview(request):
    return request.param, preview_program(REPO_ROOT, request.param)


def test_every_gcp_stack_passes_with_no_violation(gcp_preview):
    stack, resources = gcp_preview
    report = check_preview(PACK_DIR, REPO_ROOT, stack, resources)
    assert report.violations == []


def break_regime(resource_):
    inputs = resource_.inputs
    if resource_.type == "gcp:storage/bucket:Bucket":
        inputs = {
            **inputs,
            "versioning": {"enabled": False},
            "publicAccessPrevention": "inherited",
            "uniformBucketLevelAccess": False,
        }
    if resource_.type == "gcp:storage/bucketIAMMember:BucketIAMMember":
        inputs = {key: value for key, value in inputs.items() if key != "condition"}
    if resource_.type == "gcp:container/nodePool:NodePool":
        config = {**inputs["nodeConfig"], "spot": True, "taints": []}
        config["kubeletConfig"] = {"shutdownGracePeriodSeconds": 200}
        inputs = {**inputs, "nodeConfig": config, "autoscaling": {"totalMaxNodeCount": 4}}
    return dataclasses.replace(resource_, inputs=inputs)


def test_the_pack_sees_the_gcp_stacks_own_resources(gcp_preview):
    """Not vacuous: break the stack's real bucket, pools and grants, and add a service account
    key."""
    stack, resources = gcp_preview
    key = resource("gcp:serviceaccount/key:Key", "leaked", {"serviceAccountId": "a"})
    report = check_preview(PACK_DIR, REPO_ROOT, stack, [*map(break_regime, resources), key])
    has_buffer = load_config(stack_values(stack)).gcp.buffer_pool is not None
    assert {v.policy for v in report.mandatory} - {"gke-buffer-pool-on-demand-fixed"} == {
        "gcs-bucket-versioning-enabled",
        "gcs-bucket-public-access-prevented",
        "gcs-bucket-uniform-access",
        "gke-spot-pool-tainted",
        "gke-spot-pool-shutdown-grace",
        "gcp-no-service-account-keys",
        "gcs-workload-prefix-scoped",
    }
    # gcp-prod's buffer pool, broken, is caught too (gcp-dev has none).
    assert any(v.policy == "gke-buffer-pool-on-demand-fixed" for v in report.mandatory) is (
        has_buffer
    )


def test_advisory_gcp_rules_see_the_stacks_own_resources(gcp_preview):
    stack, resources = gcp_preview
    weakened = []
    for r in resources:
        if r.type == "gcp:kms/cryptoKey:CryptoKey":
            r = dataclasses.replace(r, inputs={**r.inputs, "rotationPeriod": None})
        if r.type == "gcp:storage/bucket:Bucket":
            r = dataclasses.replace(r, inputs={**r.inputs, "softDeletePolicy": {}, "labels": {}})
        if r.type == "pulumi:providers:gcp":
            r = dataclasses.replace(r, inputs={**r.inputs, "defaultLabels": {}})
        weakened.append(r)
    report = check_preview(PACK_DIR, REPO_ROOT, stack, weakened)
    assert {v.policy for v in report.violations} == {
        "gcs-bucket-cmek",
        "gcp-kms-key-rotation",
        "gcs-bucket-soft-delete",
        "gcp-cost-labels-present",
    }
