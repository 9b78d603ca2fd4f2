"""Alert rules: promtool unit tests, a test case and a runbook for every alert."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from stack_files import REPO_ROOT

from components.k8s.alerts import RULES_FILE, alert_groups
from components.k8s.dashboard import DashboardArgs, dashboard

TESTS_FILE = Path(__file__).parent / "rules" / "spot-training.test.yaml"
RUNBOOK_SECTIONS = ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation")


def promtool(*args: str) -> subprocess.CompletedProcess:
    assert shutil.which("promtool"), "promtool missing: apt-get install -y prometheus"
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def alerts() -> list[dict]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_rules_are_valid() -> None:
    result = promtool("check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", str(TESTS_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_and_stays_quiet_in_a_unit_test() -> None:
    cases = yaml.safe_load(TESTS_FILE.read_text())["tests"]
    firing, quiet = set(), set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert names <= firing, f"alerts never tested firing: {names - firing}"
    assert names <= quiet, f"alerts never tested staying quiet: {names - quiet}"


def test_issue_alerts_are_all_there() -> None:
    names = {rule["alert"] for rule in alerts()}
    assert names == {
        "SpotInterruptionRateHigh",
        "CheckpointTooOld",
        "TrainingStepsLost",
        "CheckpointCorruptSkipped",
        "JobPendingOnSpotTooLong",
        "JobRunningOnFallbackTooLong",
        "InterruptionNoticeLagHigh",
        "NoticeSourceUnreachable",
        "GoodputLow",
    }


@pytest.mark.parametrize("rule", alerts(), ids=lambda rule: rule["alert"])
def test_alert_links_a_complete_runbook(rule: dict) -> None:
    link = rule["annotations"]["runbook_url"]
    assert link == f"runbooks/training/{rule['alert']}.md"
    text = (REPO_ROOT / link).read_text()
    positions = [text.find(section) for section in RUNBOOK_SECTIONS]
    assert all(p >= 0 for p in positions), f"{link} lacks one of {RUNBOOK_SECTIONS}"
    assert positions == sorted(positions), f"{link}: sections out of order"
    # Diagnosis and Mitigation give commands to run, with the output to expect.
    assert len(re.findall(r"```(bash|console|sh)", text)) >= 2, f"{link}: no commands"
    assert rule["alert"] in text


def test_deployed_rules_link_runbooks_under_the_base_url() -> None:
    groups = alert_groups("https://git.example.com/platform/blob/main/")
    links = [
        rule["annotations"]["runbook_url"]
        for group in groups
        for rule in group["rules"]
        if "alert" in rule
    ]
    assert len(links) == len(alerts())
    for link in links:
        assert link.startswith("https://git.example.com/platform/blob/main/runbooks/training/")


def test_rules_and_dashboard_read_only_metrics_the_runtime_exports() -> None:
    import prometheus_client
    import spotsafe.metrics  # noqa: F401  (registers the runtime's metrics)

    exported = set()
    for family in prometheus_client.REGISTRY.collect():
        exported.add(family.name)
        if family.type == "counter":
            exported.add(f"{family.name}_total")
    panels = json.dumps(dashboard(DashboardArgs("monitoring", 4.0, 1.5)))
    used = set(re.findall(r"\bspotsafe_[a-z_]+", RULES_FILE.read_text() + panels))
    assert used, "the rules read no runtime metric"
    assert used <= exported, f"not exported by spotsafe: {sorted(used - exported)}"


def test_dashboard_reads_only_series_the_rules_record() -> None:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    recorded = {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}
    panels = json.dumps(dashboard(DashboardArgs("monitoring", 4.0, 1.5)))
    used = set(re.findall(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b", panels))
    assert "namespace_run:spot_training_goodput:ratio6h" in used
    assert used <= recorded, f"not recorded by the rules: {sorted(used - recorded)}"


def test_deployed_rules_price_every_class_and_capacity_first(prod_render, tmp_path) -> None:
    """The PrometheusRule holds the stack's GPU-hour prices as the first group, one series per
    class and capacity type, and Prometheus accepts the whole deployed spec."""
    from stack_files import stack_values

    from components.config import load_config
    from components.k8s.prices import PRICE_RECORD

    config = load_config(stack_values("prod"))
    (rule,) = [o for o in prod_render[0].all_objects() if o["kind"] == "PrometheusRule"]
    groups = rule["spec"]["groups"]
    prices = groups[0]["rules"]
    assert groups[0]["name"] == "spot-training-prices"
    monitoring = config.kubernetes.monitoring
    expected = {
        (c.name, capacity): getattr(monitoring.prices_of(c.name), attribute)
        for c in config.gpu_classes
        for capacity, attribute in (("spot", "spot"), ("on-demand", "on_demand"))
    }
    assert {
        (r["labels"]["label_gpu_class"], r["labels"]["label_capacity_type"]): float(
            r["expr"].removeprefix("vector(").removesuffix(")")
        )
        for r in prices
        if r["record"] == PRICE_RECORD
    } == expected
    # The cost rules read what the price group records.
    assert PRICE_RECORD in RULES_FILE.read_text()
    deployed = tmp_path / "deployed.rules.yaml"
    deployed.write_text(yaml.safe_dump({"groups": groups}))
    result = promtool("check", "rules", str(deployed))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_reviews_quarter_query_sums_the_cost_recordings(tmp_path) -> None:
    """`spotctl review --costs` reads Prometheus's answer to quarter_query: evaluated by promtool
    on the cost case of the unit tests, it gives each team's "paid" total and its causes."""
    from spotctl.review.costs import quarter_query

    document = yaml.safe_load(TESTS_FILE.read_text())
    (case,) = [
        c
        for c in document["tests"]
        if any("spot_training_gpu_hour_usd:price" in s["series"] for s in c["input_series"])
    ]
    query = quarter_query(days=1)

    def sample(team: str, cause: str, usd: float) -> dict:
        return {"labels": f'{{namespace="{team}", cause="{cause}"}}', "value": usd}

    case["promql_expr_test"] = [
        {
            "expr": query,
            "eval_time": "120m",
            "exp_samples": [
                sample("vision", "paid", 4.1),
                sample("language", "paid", 11.9),
                sample("vision", "goodput", 3.3333333333333335),
                sample("vision", "lost_work", 0.4166666666666667),
                sample("language", "goodput", 7),
            ],
        }
    ]
    case.pop("alert_rule_test", None)
    tests = tmp_path / "quarter.test.yaml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": [str(RULES_FILE)], "evaluation_interval": "1m", "tests": [case]}
        )
    )
    result = promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr
