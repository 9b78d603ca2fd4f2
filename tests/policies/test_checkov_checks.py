"""The CKV_SPOT_* checks, run through the checkov CLI with --external-checks-dir, on pass, fail and
missing-property fixtures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from checkov_run import checkov
from spot_policy_cases import PACK_DIR

FIXTURES = Path(__file__).parent / "checkov"
CHECKS = "CKV_SPOT_1,CKV_SPOT_2,CKV_SPOT_3,CKV_SPOT_4,CKV_SPOT_5"
BIN = Path(sys.executable).parent


def run_checkov(directory: Path, *frameworks: str) -> dict[tuple[str, str], str]:
    """{(file path relative to `directory`, check id): "passed" | "failed"} for CKV_SPOT_*."""
    process = checkov(
        "-d", str(directory), "--framework", *frameworks, "--check", CHECKS, timeout=180
    )  # fmt: skip
    assert process.returncode in (0, 1), process.stderr
    reports = json.loads(process.stdout)
    return {
        (
            item["file_path"].split(f"{directory.name}/", 1)[-1].lstrip("/"),
            item["check_id"],
        ): outcome
        for report in (reports if isinstance(reports, list) else [reports])
        for outcome in ("passed", "failed")
        for item in report["results"][f"{outcome}_checks"]
    }


@pytest.fixture(scope="module")
def fixture_results():
    return run_checkov(FIXTURES, "kubernetes", "dockerfile")


@pytest.mark.parametrize(
    ("fixture", "check", "outcome"),
    [
        ("job-compliant.yaml", "CKV_SPOT_1", "passed"),
        ("job-counts-disruption.yaml", "CKV_SPOT_1", "failed"),
        ("job-missing-policy.yaml", "CKV_SPOT_1", "failed"),
        ("job-on-demand.yaml", "CKV_SPOT_1", "passed"),
        ("deployment-stable.yaml", "CKV_SPOT_2", "passed"),
        ("deployment-on-spot.yaml", "CKV_SPOT_2", "failed"),
        ("deployment-no-tolerations.yaml", "CKV_SPOT_2", "passed"),
        ("job-compliant.yaml", "CKV_SPOT_3", "passed"),
        ("job-counts-disruption.yaml", "CKV_SPOT_3", "passed"),
        ("job-missing-policy.yaml", "CKV_SPOT_3", "failed"),
        ("job-on-demand.yaml", "CKV_SPOT_3", "passed"),
        ("job-multi-node-spotsafe-run.yaml", "CKV_SPOT_5", "passed"),
        ("job-multi-node-torchrun.yaml", "CKV_SPOT_5", "failed"),
        ("job-multi-node-hosts-rendezvous.yaml", "CKV_SPOT_5", "failed"),
        # torchrun however the container starts it: a shell's script, env, the old module
        ("job-multi-node-shell-torchrun.yaml", "CKV_SPOT_5", "failed"),
        ("job-multi-node-env-torchrun.yaml", "CKV_SPOT_5", "failed"),
        ("job-multi-node-distributed-launch.yaml", "CKV_SPOT_5", "failed"),
        ("job-multi-node-shell-spotsafe-run.yaml", "CKV_SPOT_5", "passed"),
        ("job-compliant.yaml", "CKV_SPOT_5", "passed"),  # the image's own entry point
    ],
)
def test_kubernetes_checks(fixture_results, fixture, check, outcome):
    assert fixture_results[(f"k8s/{fixture}", check)] == outcome


@pytest.mark.parametrize(
    ("fixture", "outcome"),
    [
        ("non-root/Dockerfile", "passed"),
        ("root/Dockerfile", "failed"),
        ("no-user-in-final-stage/Dockerfile", "failed"),
    ],
)
def test_image_runs_as_non_root(fixture_results, fixture, outcome):
    assert fixture_results[(f"docker/{fixture}", "CKV_SPOT_4")] == outcome


def test_rendered_prod_manifests_pass_every_spot_check(tmp_path):
    out = tmp_path / "prod"
    render = subprocess.run(
        [str(BIN / "spotctl"), "render", "--stack", "prod", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert render.returncode == 0, render.stderr
    results = run_checkov(out, "kubernetes")
    job_templates = {path for path, check in results if check == "CKV_SPOT_1"}
    assert len(job_templates) >= 2, "the training Job templates were not checked"
    assert {key: outcome for key, outcome in results.items() if outcome == "failed"} == {}


def test_training_image_runs_as_non_root():
    image_dir = PACK_DIR.parent / "training-image"
    results = run_checkov(image_dir, "dockerfile")
    assert results == {("Dockerfile", "CKV_SPOT_4"): "passed"}


# The checkov checks and the admission rules that say the same thing (docs/kubernetes.md), judged
# on the same fixtures: the cluster refuses exactly what the scan fails.
SAME_RULE = {
    "CKV_SPOT_1": "spot-job-ignores-disruption",
    "CKV_SPOT_2": "services-avoid-spot-and-gpu-nodes",
    "CKV_SPOT_3": "spot-job-ignores-preempted-exit",
}


def admission_verdict(rule_name: str, obj: dict) -> str:
    """The rule's verdict on the object created in a team namespace whose mode is Deny."""
    from components.k8s.admission import RULES, Regime, bindings, policy
    from spotctl.render.admission import admit

    [rule] = [r for r in RULES if r.name == rule_name]
    regime = Regime(
        {"team": "s3://bucket/team"},
        ("registry.example.com/train",),
        120,
        ("sigterm",),
        "training",
        ("nvidia.com/gpu",),
    )
    namespace = {"metadata": {"name": "team", "labels": {"spot-training/team": "team"}}}
    verdict = admit(
        [policy(rule, regime)], bindings([rule_name], {"team": "Deny"}, {}), obj, namespace
    )
    return "passed" if verdict.allowed else "failed"


def test_admission_rules_agree_with_the_checkov_checks(fixture_results):
    compared = {}
    for (path, check), outcome in fixture_results.items():
        if check not in SAME_RULE:
            continue
        [obj] = yaml.safe_load_all((FIXTURES / path).read_text())
        compared[(path, check)] = (outcome, admission_verdict(SAME_RULE[check], obj))
    assert {key: pair for key, pair in compared.items() if pair[0] != pair[1]} == {}
    # Each pair is judged on passing and failing fixtures alike.
    for check in SAME_RULE:
        assert {c[0] for (_, c_id), c in compared.items() if c_id == check} == {"passed", "failed"}
