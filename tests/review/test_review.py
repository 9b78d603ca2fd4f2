"""`spotctl review` over the repository: its three outputs, the HTML page as headless Chromium
renders it, and each mandatory problem and flag it is there to find."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest
import yaml
from pack_copy import pack_copy
from PIL import Image
from stack_files import stack_values

from spotctl.preview.resources import PreviewResource
from spotctl.review.collect import (
    REPO,
    Review,
    ReviewError,
    ami_release,
    collect,
    pinned_versions,
    review_admission,
    review_costs,
    review_drills,
    review_provider_data,
    review_runbooks,
    review_versions,
    stacks,
)

DRILLS = Path(__file__).parent / "drills"
COSTS = Path(__file__).parent / "costs" / "2026Q4-costs.json"
DAY = date(2026, 11, 30)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def spotctl_review(*args: str) -> subprocess.CompletedProcess:
    spotctl = Path(sys.executable).parent / "spotctl"
    return subprocess.run(
        [str(spotctl), "review", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("review")
    result = spotctl_review(
        "--out",
        str(out),
        "--quarter",
        "2026Q4",
        "--date",
        str(DAY),
        "--drill-reports",
        str(DRILLS),
        "--costs",
        str(COSTS),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_the_review_writes_json_markdown_and_html(reviewed):
    document = json.loads((reviewed / "review.json").read_text())
    assert document["quarter"] == "2026Q4" and document["mandatory"] == []
    assert [s["stack"] for s in document["stacks"]] == stacks(REPO)
    prod = next(s for s in document["stacks"] if s["stack"] == "prod")
    assert prod["verdict"] == "pass"
    narrow = [
        r
        for r in prod["headroom"]
        if r["setting"] == "minInstanceTypes" and "h100" in r["resource"]
    ]
    assert [(r["threshold"], r["actual"], r["headroom"]) for r in narrow] == [(3, 2, -1)]
    (drill,) = document["drills"]
    assert (drill["jobs"], drill["finished"], drill["goodput"]) == (2, 2, 0.91)
    assert {v["component"] for v in document["versions"]} >= {"kubernetes", "kueue", "torch"}
    # New clusters start in standard support: no Kubernetes pin is past it.
    assert not [f for f in document["flags"] + document["mandatory"] if "extended support" in f]
    # Each team's quarter: what it paid, and what its lost work cost.
    costs = {row["team"]: row for row in document["costs"]}
    assert costs["vision"]["paid_usd"] == 41230 and costs["vision"]["lost_work_usd"] == 1650
    assert costs["vision"]["other_badput_usd"] == 1300  # restore and pod start
    assert costs["vision"]["lost_work_share"] == pytest.approx(1650 / 41230.4)
    assert costs["language"]["lost_work_usd"] == 0 and costs["language"]["goodput_usd"] == 11904
    assert "no cost report given (--costs)" not in document["flags"]
    text = (reviewed / "review.md").read_text()
    assert "| vision | 41230 | 35120 | 1650 | 1300 | 0.04 |" in text
    assert "## Stack prod: thresholds and headroom" in text and "| 2026-11-02-drill.json |" in text
    page = (reviewed / "review.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "the page fetches something"
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', page)) >= 3


def chromium(*args: str, user_data: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    assert binary, "chromium missing: apt-get install -y chromium (make setup does)"
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={user_data}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_chromium_renders_the_tables_and_decodes_every_image(reviewed, tmp_path):
    # A copy of the page that writes what the browser made of it into the DOM, once loaded.
    probe = tmp_path / "probe.html"
    probe.write_text(
        (reviewed / "review.html")
        .read_text()
        .replace(
            "</body>",
            "<script>window.addEventListener('load', () => { const p = document.createElement("
            "'pre'); p.id = 'probe'; p.textContent = JSON.stringify({images: [...document.images]"
            ".map(i => [i.complete, i.naturalWidth, i.naturalHeight]), rows: document."
            "querySelectorAll('table tr').length}); document.body.appendChild(p); });</script>"
            "</body>",
        )
    )
    dumped = chromium("--dump-dom", probe.as_uri(), user_data=tmp_path / "profile-dom")
    found = re.search(r'<pre id="probe">(.*?)</pre>', dumped.stdout)
    assert found, dumped.stderr[-2000:]
    seen = json.loads(found.group(1).replace("&quot;", '"'))
    assert len(seen["images"]) >= 3
    assert all(
        complete and width > 100 and height > 50 for complete, width, height in seen["images"]
    )
    assert seen["rows"] > 40

    shot = tmp_path / "review.png"
    taken = chromium(
        f"--screenshot={shot}",
        "--window-size=1200,2400",
        (reviewed / "review.html").as_uri(),
        user_data=tmp_path / "profile-shot",
    )
    assert shot.is_file(), taken.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50, "the screenshot is blank or nearly so"
    # The charts' bars: green, orange or red pixels somewhere on the page.
    assert any(g > 150 and r < 100 for _, (r, g, b) in colours)


@pytest.fixture(scope="module")
def previews(stack_previews) -> dict[str, list[PreviewResource]]:
    return {stack: stack_previews(stack) for stack in stacks(REPO)}


def test_a_version_past_its_end_of_support_is_mandatory(previews):
    review = collect(day=date(2030, 1, 1), quarter="2029Q4", previews=previews)
    assert "kueue 0.19.2 is past its end of support (2027-02-28)" in review.mandatory
    assert any("last reviewed" in flag for flag in review.flags)


def test_a_default_past_standard_support_is_mandatory(previews):
    """EKS bills extended support extra: a new cluster must not start there (1.35's standard
    support ends 2027-03-27, docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html)."""
    review = collect(day=date(2027, 4, 1), quarter="2027Q2", previews=previews)
    assert (
        "Kubernetes 1.35 is in EKS extended support (billed extra) since 2027-03-27, and new "
        "clusters start on it: move the default" in review.mandatory
    )


def test_an_ami_alias_older_than_the_window_is_flagged(monkeypatch):
    assert ami_release("al2023@v20260520") == date(2026, 5, 20)
    assert ami_release("bottlerocket@v1.30.0") is None
    monkeypatch.setattr("components.versions.GPU_AMI_ALIAS", "al2023@v20260520")
    review = Review("2026Q3", date(2026, 8, 1))
    review_versions(review)
    assert not [f for f in review.flags if f.startswith("GPU node AMI")]
    review = Review("2026Q4", date(2026, 12, 1))
    review_versions(review)
    assert (
        "GPU node AMI al2023@v20260520 was released 195 days ago (over 90): pin a newer alias"
        in review.flags
    )


def test_the_cli_exits_3_on_a_mandatory_problem(tmp_path):
    result = spotctl_review("--out", str(tmp_path), "--date", "2030-01-01")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "MANDATORY: kubernetes 1.35 is past its end of support" in result.stdout
    assert json.loads((tmp_path / "review.json").read_text())["mandatory"]


def test_an_expired_waiver_is_mandatory(previews, tmp_path):
    expired = date.today() - timedelta(days=1)
    pack = pack_copy(
        tmp_path / "pack",
        "waivers:\n  - {policy: karpenter-spot-pool-diversified, stack: prod, resource: '*',"
        f" reason: p5 only, owner: language-team, expires: {expired}}}\n",
    )
    review = collect(day=date.today(), quarter="2026Q4", pack=pack, previews=previews)
    assert (
        f"waiver of karpenter-spot-pool-diversified for prod/* (language-team) expired on {expired}"
        in review.mandatory
    )
    assert "stack prod: mandatory waiver-not-expired on stack" in review.mandatory


def test_a_mandatory_policy_violation_is_mandatory(previews, tmp_path):
    config = tmp_path / "policy.json"
    config.write_text('{"karpenter-spot-pool-diversified": "mandatory"}')
    pack = pack_copy(tmp_path / "pack", "waivers: []\n")
    review = collect(day=DAY, quarter="2026Q4", pack=pack, policy_config=config, previews=previews)
    assert review.mandatory == [
        "stack prod: mandatory karpenter-spot-pool-diversified on "
        "prod-karpenter-h100-80gb-spot-nodepool"
    ]


def test_every_pin_has_its_end_of_support():
    missing = [p["component"] for p in pinned_versions() if p["end"] is None]
    assert missing == []


def alarm(name: str, runbook: str) -> PreviewResource:
    return PreviewResource(
        urn=f"urn:pulumi:prod::spot-training::aws:cloudwatch/metricAlarm:MetricAlarm::{name}",
        type="aws:cloudwatch/metricAlarm:MetricAlarm",
        name=name,
        parent=None,
        custom=True,
        inputs={"alarmDescription": f"Runbook: https://git.example/blob/main/{runbook}"},
    )


def test_alert_runbook_coverage_in_both_directions():
    review = Review("2026Q4", DAY)
    review_runbooks(
        review,
        {
            "prod": [
                alarm("prod-GpuIdleHigh", "runbooks/aws/GpuIdleHigh.md"),
                alarm("prod-DiskFull", "runbooks/aws/DiskFull.md"),
            ]
        },
    )
    alerts = {(a["source"], a["alert"]): a["exists"] for a in review.sections["runbooks"]["alerts"]}
    assert (
        alerts[("CloudWatch alarm", "GpuIdleHigh")]
        and alerts[("Prometheus alert", "CheckpointTooOld")]
    )
    assert (
        "CloudWatch alarm DiskFull links no runbook that exists (runbooks/aws/DiskFull.md)"
        in review.flags
    )
    assert "runbooks/aws/SpotInterruptionsHigh.md: no alert of the stacks links it" in review.flags
    assert "runbooks/training/CheckpointTooOld.md" not in review.sections["runbooks"]["unlinked"]


def provider_table(tmp_path: Path, read_on: date, aws: dict[str, dict[str, str]]) -> Path:
    """A provider data table read on `read_on` with the AWS bands given, per region and type."""
    rows = {
        region: {
            name: {"band": band, "on_demand": 2.0, "spot": 1.0, "read": read_on, "sources": ["t"]}
            for name, band in types.items()
        }
        for region, types in aws.items()
    }
    path = tmp_path / "provider-data.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "date": read_on,
                "source": "test",
                "bands": ["<5%", "5-10%", "10-15%", "15-20%", ">20%"],
                "sources": {"t": "test"},
                "gcp_spot_band": {"band": "10-15%", "why": "test"},
                "aws": rows,
            }
        )
    )
    return path


def test_provider_data_gives_a_verdict_per_pool(tmp_path):
    bands = {"p5.48xlarge": ">20%", "p5.4xlarge": "<5%", "g6e.12xlarge": "<5%",
             "g6e.24xlarge": "<5%", "g6e.48xlarge": "5-10%"}  # fmt: skip
    data = provider_table(tmp_path, date(2026, 6, 1), {"us-west-2": bands})
    review = Review("2026Q4", DAY)
    review_provider_data(review, data, REPO, ["dev", "prod"])
    verdicts = {
        (p["stack"], p["pool"]): p["verdict"] for p in review.sections["provider_data"]["pools"]
    }
    assert verdicts[("prod", "h100-80gb")] == "replace p5.48xlarge (highest interruption band)"
    assert verdicts[("prod", "l40s-48gb")] == "keep"
    assert verdicts[("dev", "a10g-24gb")].startswith("no data for g5.2xlarge")
    assert any("provider-data.yaml was read 182 days ago" in f for f in review.flags)


def test_the_review_reads_stacks_where_pulumi_does(tmp_path):
    """The stack files in `stackConfigDir`, under Pulumi.yaml's `config:` defaults, as the CLI
    reads them (Pulumi project file reference: `stackConfigDir`, project-level `config`)."""
    (tmp_path / "Pulumi.yaml").write_text(
        "name: spot-training\nruntime: python\nstackConfigDir: environments\n"
        "config:\n  region:\n    type: string\n    default: us-west-2\n"
    )
    (tmp_path / "environments").mkdir()
    (tmp_path / "environments" / "Pulumi.west.yaml").write_text(
        "config:\n  spot-training:cloud: aws\n"
        "  spot-training:gpu_classes: [{name: h100-80gb, instance_types: [p5.48xlarge]}]\n"
    )
    data = provider_table(tmp_path, date(2026, 11, 1), {"us-west-2": {"p5.48xlarge": ">20%"}})
    review = Review("2026Q4", DAY)
    review_provider_data(review, data, tmp_path, stacks(tmp_path))
    [pool] = review.sections["provider_data"]["pools"]
    assert (pool["stack"], pool["region"]) == ("west", "us-west-2")
    assert pool["verdict"] == "replace p5.48xlarge (highest interruption band)"


def test_a_drill_report_that_is_not_one_is_a_clear_error(tmp_path):
    (tmp_path / "notes.json").write_text('{"seed": 1}')
    with pytest.raises(ReviewError, match=r"notes.json: not a drill report \('jobs'\)"):
        review_drills(Review("2026Q4", DAY), tmp_path)


def test_a_bad_drill_report_is_refused_before_any_preview(tmp_path, monkeypatch):
    def preview_program(program, stack):
        raise AssertionError(f"stack {stack} previewed before the drill reports were read")

    monkeypatch.setattr("spotctl.review.collect.preview_program", preview_program)
    (tmp_path / "notes.json").write_text('{"seed": 1}')
    with pytest.raises(ReviewError, match=r"notes.json: not a drill report \('jobs'\)"):
        collect(day=DAY, quarter="2026Q4", drill_reports=tmp_path, costs=COSTS)


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        ("[]", 'not a successful Prometheus answer ("status": "success")'),
        (
            '{"status": "success", "data": {"resultType": "matrix", "result": []}}',
            'data.resultType is not "vector": save an instant query',
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": '
            '[{"metric": {"namespace": "vision"}, "value": [0, "1"]}]}}',
            "data.result[0]: not a sample with namespace and cause ('cause')",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": '
            '[{"metric": {"namespace": "vision", "cause": "paid"}, "value": [0, "NaN"]}]}}',
            "data.result[0]: cost 'NaN' is not a finite amount",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": '
            '[{"metric": {"namespace": "vision", "cause": "lost_work"}, "value": [0, "3"]}]}}',
            "team 'vision' has causes but no \"paid\" total",
        ),
    ],
)
def test_a_costs_file_that_is_not_the_quarters_answer_is_one_clear_line(
    tmp_path, answer, complaint
):
    costs = tmp_path / "costs.json"
    costs.write_text(answer)
    with pytest.raises(ReviewError) as raised:
        review_costs(Review("2026Q4", DAY), costs)
    assert str(raised.value) == f"{costs}: {complaint}"


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (("--date", "30/11/2026"), "--date '30/11/2026': not a date (YYYY-MM-DD)"),
        (("--quarter", "2026-Q4"), "--quarter '2026-Q4': not a quarter"),
        (("--drill-reports", "/nonexistent"), "--drill-reports /nonexistent: not a directory"),
        (("--costs", "/nonexistent.json"), "/nonexistent.json: not readable JSON"),
    ],
)
def test_bad_arguments_are_clear_errors(tmp_path, args, complaint):
    result = spotctl_review("--out", str(tmp_path), *args)
    assert result.returncode == 2 and complaint in result.stderr, result.stderr


def test_the_operations_guide_saves_the_answer_to_the_query_the_review_reads():
    from spotctl.review.costs import quarter_query

    guide = (REPO / "docs" / "operations.md").read_text()
    assert f"query={quarter_query(92)}'" in guide  # 2026Q4 has 92 days


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (
            "# Broken\n",
            "runbooks/ops/Broken.md: no front matter (---\\nlast_reviewed: YYYY-MM-DD\\n---)",
        ),
        (
            "---\nlast_reviewed: [2026-11-01\n---\n# Broken\n",
            "runbooks/ops/Broken.md:2: front matter is not valid YAML: expected ',' or ']', but "
            "got '<stream end>'",
        ),
    ],
)
def test_a_runbook_the_review_cannot_read_is_one_clear_error(
    tmp_path, monkeypatch, text, complaint
):
    (tmp_path / "runbooks" / "ops").mkdir(parents=True)
    (tmp_path / "runbooks" / "ops" / "Broken.md").write_text(text)
    monkeypatch.setattr("spotctl.review.collect.REPO", tmp_path)
    with pytest.raises(ReviewError) as raised:
        collect(day=DAY, quarter="2026Q4", drill_reports=DRILLS, costs=COSTS, previews={})
    assert str(raised.value) == complaint


def test_admission_modes_and_waivers_are_listed_and_an_expired_waiver_is_mandatory(
    program_copy,
):
    values = stack_values("prod")
    waiver = {"namespace": "team-vision", "reason": "base image moves", "owner": "vision-leads"}
    values["kubernetes"] = {
        **values.get("kubernetes", {}),
        "admission": {
            "mode": "Deny",
            "namespace_modes": {"team-language": "Audit"},
            "waivers": [
                {**waiver, "rule": "images-from-stack-registry-by-digest", "expires": "2026-12-30"},
                {**waiver, "rule": "pods-unprivileged", "expires": "2026-11-29"},
            ],
        },
    }
    review = Review("2026Q4", DAY)
    review_admission(review, program_copy("prod", values), ["prod"])
    rows = review.sections["admission"]
    assert [(r["namespace"], r["mode"], r["waived_rules"]) for r in rows["namespaces"]] == [
        ("team-vision", "Deny", "images-from-stack-registry-by-digest"),
        ("team-language", "Audit", ""),
    ]
    assert [(w["rule"], w["days_left"], w["status"]) for w in rows["waivers"]] == [
        ("images-from-stack-registry-by-digest", 30, "expiring"),
        ("pods-unprivileged", -1, "expired"),
    ]
    assert review.mandatory == [
        "stack prod: admission waiver of pods-unprivileged for team-vision (vision-leads) "
        "expired on 2026-11-29: the next pulumi up enforces the rule"
    ]
    assert review.flags == [
        "stack prod: namespace team-language is in admission mode Audit: breaches are admitted, "
        "not refused; switch it to Deny (kubernetes.admission.namespace_modes)",
        "stack prod: admission waiver of images-from-stack-registry-by-digest for team-vision "
        "(vision-leads) expires in 30 days",
    ]


def test_the_admission_runbook_is_linked_by_the_admission_policies(previews):
    review = Review("2026Q4", DAY)
    review_runbooks(review, previews)
    assert (
        "runbooks/training/JobRefusedAtAdmission.md" not in review.sections["runbooks"]["unlinked"]
    )
    assert {
        "source": "Admission policy",
        "alert": "JobRefusedAtAdmission",
        "runbook": "runbooks/training/JobRefusedAtAdmission.md",
        "exists": True,
    } in (review.sections["runbooks"]["alerts"])
