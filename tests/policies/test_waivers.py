"""Waivers in the pack's waivers.yaml, honoured by the pack itself (so by the Pulumi CLI and by
`spotctl preview` alike): waived, expired, stale, for another stack, and malformed."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest
from pack_copy import PACK_DIR, pack_copy

from spotctl.preview.analyzer import PolicyPackError, check_preview, format_report
from spotctl.preview.resources import preview_program

PROGRAM = Path(__file__).parent / "programs" / "untainted-spot-pool"
LATER = date.today() + timedelta(days=30)
EARLIER = date.today() - timedelta(days=1)


def waiver(policy="eks-spot-pool-tainted", stack="test", resource="spot", expires=LATER) -> str:
    return (
        f"  - policy: {policy}\n    stack: '{stack}'\n    resource: '{resource}'\n"
        f"    reason: waiting for the taint rollout\n    owner: vision-oncall\n"
        f"    expires: {expires}\n"
    )


@pytest.fixture(scope="module")
def resources():
    return preview_program(PROGRAM, "test")


def verdict(tmp_path, resources, *waivers: str):
    pack = pack_copy(tmp_path / "pack", "waivers:\n" + "".join(waivers))
    return check_preview(pack, PROGRAM, "test", resources)


def test_a_waived_violation_is_reported_as_waived(tmp_path, resources):
    report = verdict(tmp_path, resources, waiver())
    assert report.mandatory == []
    (waived,) = report.waived
    assert waived.urn.endswith("::spot")
    assert f"eks-spot-pool-tainted waived until {LATER} (vision-oncall: waiting" in waived.message
    assert "has no taint" in waived.message
    text = format_report(report)
    assert "waived (1):" in text
    assert "[waived] waived-violation (aws:eks/nodeGroup:NodeGroup::spot)" in text


def test_an_expired_waiver_is_a_mandatory_violation(tmp_path, resources):
    report = verdict(tmp_path, resources, waiver(expires=EARLIER))
    assert {v.policy for v in report.mandatory} == {"eks-spot-pool-tainted", "waiver-not-expired"}
    (expired,) = [v for v in report.mandatory if v.policy == "waiver-not-expired"]
    assert f"expired on {EARLIER}" in expired.message and "vision-oncall" in expired.message
    assert report.waived == []


def test_a_waiver_that_covers_nothing_is_stale(tmp_path, resources):
    report = verdict(
        tmp_path, resources, waiver(), waiver(policy="s3-bucket-versioning-enabled", resource="*")
    )
    stale = [v for v in report.violations if v.policy == "waiver-still-needed"]
    assert [v.level for v in stale] == ["advisory"]
    assert "waiver of s3-bucket-versioning-enabled for test/* " in stale[0].message
    assert len(report.waived) == 1 and report.mandatory == []


@pytest.mark.parametrize(("stack", "resource"), [("prod", "spot"), ("test", "other-*")])
def test_a_waiver_covers_only_its_stack_and_resources(tmp_path, resources, stack, resource):
    report = verdict(tmp_path, resources, waiver(stack=stack, resource=resource))
    assert [v.policy for v in report.mandatory] == ["eks-spot-pool-tainted"]
    assert report.waived == []


@pytest.mark.parametrize(
    ("waivers", "complaint"),
    [
        (waiver(expires="next week"), "waivers.yaml: waivers[0].expires: must be a date"),
        (waiver() + "    ticket: OPS-1\n", "waivers.yaml: waivers[0].ticket: unknown field"),
        (waiver().replace("vision-oncall", "''"), "waivers.yaml: waivers[0].owner: must be a"),
    ],
)
def test_a_malformed_waiver_stops_the_pack_with_its_field(tmp_path, resources, waivers, complaint):
    with pytest.raises(PolicyPackError, match=re.escape(complaint)):
        verdict(tmp_path, resources, waivers)


def test_spotctl_preview_exits_0_on_a_waived_mandatory_violation(tmp_path):
    pack = pack_copy(tmp_path / "pack", "waivers:\n" + waiver())
    spotctl = Path(sys.executable).parent / "spotctl"
    result = subprocess.run(
        [str(spotctl), "preview", "--stack", "test", "--program", str(PROGRAM)]
        + ["--policy-pack", str(pack)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "waived (1):" in result.stdout and "mandatory (" not in result.stdout


def test_the_readme_example_is_a_valid_waiver(tmp_path):
    text = (PACK_DIR / "README.md").read_text()
    example = text.split("## Waivers that expire")[1].split("```yaml\n")[1].split("```")[0]
    (tmp_path / "waivers.yaml").write_text(example)
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from policies.waivers import load_waivers as load; "
            "from pathlib import Path; print(load(Path(sys.argv[1])))",
            str(tmp_path / "waivers.yaml"),
        ],
        cwd=PACK_DIR.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Waiver(policy='eks-spot-pool-diversified', stack='dev'" in loaded.stdout, loaded.stderr
