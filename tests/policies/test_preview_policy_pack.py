"""End to end: `spotctl preview --policy-pack` on small programs of our own, and the pack's verdict
on every stack under stacks/."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from spot_policy_cases import PACK_DIR
from stack_files import AWS_STACKS, REPO_ROOT

from policies.waiver_rules import WAIVED
from spotctl.preview.analyzer import PolicyPackError, check_preview, read_policy_config
from spotctl.preview.resources import preview_program

PROGRAMS = Path(__file__).parent / "programs"


def spotctl_preview(*args: str) -> subprocess.CompletedProcess:
    spotctl = Path(sys.executable).parent / "spotctl"
    return subprocess.run(
        [str(spotctl), "preview", *args], capture_output=True, text=True, timeout=300
    )


def mandatory_section(output: str) -> str:
    return output.split("mandatory (")[1].split("advisory (")[0] if "mandatory (" in output else ""


@pytest.mark.parametrize(
    ("program", "caught"),
    [
        (
            "unversioned-bucket",
            {
                "s3-bucket-versioning-enabled",
                "s3-bucket-public-access-blocked",
                "s3-bucket-tls-only",
            },
        ),
        (
            "wildcard-iam",
            {
                "iam-no-wildcard-admin",
                "iam-workload-prefix-scoped",
                "iam-workload-no-delete-object-version",
            },
        ),
        ("untainted-spot-pool", {"eks-spot-pool-tainted"}),
        ("preemption-fails-job", {"k8s-spot-job-ignores-disruption"}),
    ],
)
def test_broken_program_is_stopped(program, caught):
    result = spotctl_preview(
        "--stack", "test", "--program", str(PROGRAMS / program), "--policy-pack", str(PACK_DIR)
    )
    assert result.returncode == 3, result.stdout + result.stderr
    section = mandatory_section(result.stdout)
    headers = [line.strip() for line in section.splitlines() if line.strip().startswith("[")]
    reported = {line.split("] ")[1].split(" (")[0] for line in headers}
    assert reported == caught


def test_compliant_program_passes_with_provider_default_tags():
    result = spotctl_preview(
        "--stack",
        "test",
        "--program",
        str(PROGRAMS / "compliant-bucket"),
        "--policy-pack",
        str(PACK_DIR),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("no violations")


def test_policy_pack_config_can_relax_a_policy(tmp_path):
    config = tmp_path / "policy-config.json"
    config.write_text('{"eks-spot-pool-tainted": "advisory"}')
    result = spotctl_preview(
        *("--stack", "test", "--program", str(PROGRAMS / "untainted-spot-pool")),
        *("--policy-pack", str(PACK_DIR), "--policy-pack-config", str(config)),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[advisory] eks-spot-pool-tainted" in result.stdout
    # Each violation says how to fix it and where the policy is explained.
    assert "fix: Add a taint with effect NO_SCHEDULE" in result.stdout
    assert "see: https://" in result.stdout and "README.md#eks-spot-pool-tainted" in result.stdout


@pytest.mark.parametrize(
    ("config", "complaint"),
    [
        (
            '{"eks-spot-pool-diversified": {"minInstanceTypes": "three"}}',
            "is not of type 'integer'",
        ),
        ('{"no-such-policy": "mandatory"}', "unknown policies: no-such-policy"),
        ('{"eks-spot-pool-tainted": "blocking"}', "'blocking' is not one of"),
        ("not json", "--policy-pack-config"),
    ],
)
def test_bad_policy_config_is_a_clear_error(tmp_path, config, complaint):
    path = tmp_path / "policy-config.json"
    path.write_text(config)
    with pytest.raises(PolicyPackError, match=re.escape(complaint)):
        check_preview(
            PACK_DIR, PROGRAMS / "untainted-spot-pool", "test", [], read_policy_config(path)
        )


def test_a_policy_config_that_is_not_utf8_is_refused_before_the_preview(tmp_path):
    config = tmp_path / "policy-config.json"
    config.write_bytes(b'{"eks-spot-pool-tainted": "adv\xffisory"}')
    result = spotctl_preview(
        *("--stack", "test", "--program", str(PROGRAMS / "untainted-spot-pool")),
        *("--policy-pack", str(PACK_DIR), "--policy-pack-config", str(config)),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: --policy-pack-config {config}: "), result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Previewing" not in result.stdout


def test_not_a_policy_pack_is_a_clear_error(tmp_path):
    result = spotctl_preview(
        *("--stack", "test", "--program", str(PROGRAMS / "untainted-spot-pool")),
        *("--policy-pack", str(tmp_path)),
    )
    assert result.returncode == 2
    assert "no PulumiPolicy.yaml" in result.stderr and "Traceback" not in result.stderr


# The GCP stacks have tests of their own (test_gcp_stack_policies.py).
@pytest.fixture(scope="module", params=AWS_STACKS)
def stack_preview(request):
    return request.param, preview_program(REPO_ROOT, request.param)


def test_every_stack_passes_with_no_violation_but_waived_ones(stack_preview):
    """The shipped stacks pass the shipped pack, advisory rules included; what they cannot fix
    (prod's H100 spot pool: EC2 has two H100 types) is waived in waivers.yaml, with an expiry."""
    stack, resources = stack_preview
    report = check_preview(PACK_DIR, REPO_ROOT, stack, resources)
    unwaived = [v for v in report.violations if v.policy != WAIVED]
    assert unwaived == []
    for violation in report.violations:
        assert re.search(r" waived until \d{4}-\d{2}-\d{2} \(", violation.message), violation


def break_regime(resource):
    """The stack's own resource with one rule of the regime broken, or None to drop it."""
    inputs = resource.inputs
    if resource.type == "aws:s3/bucketVersioning:BucketVersioning":
        return None
    if resource.type == "kubernetes:karpenter.sh/v1:NodePool" and resource.name.endswith(
        "-spot-nodepool"
    ):
        template = {**inputs["spec"]["template"]["spec"], "taints": []}
        inputs = {**inputs, "spec": {**inputs["spec"], "template": {"spec": template}}}
    if resource.type == "aws:ec2/launchTemplate:LaunchTemplate":
        inputs = {
            **inputs,
            "metadataOptions": {**inputs["metadataOptions"], "httpPutResponseHopLimit": 2},
        }
    if resource.type.endswith(":PriorityClass") and "services" in inputs["metadata"]["name"]:
        inputs = {**inputs, "value": 1}
    if resource.type == "aws:iam/rolePolicy:RolePolicy" and resource.name.endswith(
        "-training-policy"
    ):
        document = json.loads(inputs["policy"])
        for statement in document["Statement"]:
            if statement["Action"] == "s3:DeleteObjectVersion":
                statement["Effect"] = "Allow"
        inputs = {**inputs, "policy": json.dumps(document)}
    return dataclasses.replace(resource, inputs=inputs)


def test_the_pack_sees_the_stacks_own_resources(stack_preview):
    """Not vacuous: break the stack's real bucket, spot pools, node metadata, priorities and
    team roles."""
    stack, resources = stack_preview
    broken = [r for r in map(break_regime, resources) if r is not None]
    report = check_preview(PACK_DIR, REPO_ROOT, stack, broken)
    assert {v.policy for v in report.mandatory} == {
        "s3-bucket-versioning-enabled",
        "karpenter-spot-pool-tainted",
        "ec2-imds-pods-kept-out",
        "k8s-services-priority-not-preemptible",
        "iam-workload-no-delete-object-version",
        # the flipped statement also reaches every object of the bucket, not the team's prefix
        "iam-workload-prefix-scoped",
    }
