"""`spotctl render` of the prod stack: complete, valid and checkov-clean."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import yaml
from chart_values import unknown_keys
from stack_files import REPO_ROOT, stack_values

from components.config import load_config
from components.k8s import monitoring
from spotctl.render import KUBERNETES_VERSION, Rendered, validate

PROD = load_config(stack_values("prod"))
TEAMS = {team.name: team.namespace for team in PROD.teams}


def by_kind(rendered: Rendered, kind: str) -> list[dict]:
    return [obj for obj in rendered.all_objects() if obj["kind"] == kind]


def test_prod_render_validates(prod_render: tuple[Rendered, Path], shared_schemas: Path) -> None:
    rendered, _ = prod_render
    problems, unvalidated = validate(rendered.all_objects(), KUBERNETES_VERSION, [shared_schemas])
    assert problems == []
    # Every kind has a schema: built-in ones, and the CRDs of ../shared/schemas.
    assert unvalidated == []


def test_validation_targets_the_prod_cluster_version() -> None:
    assert f"{KUBERNETES_VERSION}.0" in kubernetes_validate.utils.all_versions()
    assert PROD.aws.cluster.create.version == KUBERNETES_VERSION


def test_every_team_gets_namespace_quota_queue_and_templates(
    prod_render: tuple[Rendered, Path],
) -> None:
    rendered, out = prod_render
    namespaces = {ns["metadata"]["name"] for ns in by_kind(rendered, "Namespace")}
    assert namespaces == {*TEAMS.values(), monitoring.NAMESPACE}
    for kind in ("ResourceQuota", "LimitRange", "LocalQueue", "NetworkPolicy", "ServiceAccount"):
        namespaces = {obj["metadata"]["namespace"] for obj in by_kind(rendered, kind)}
        assert namespaces == set(TEAMS.values()), kind
    assert {cq["metadata"]["name"] for cq in by_kind(rendered, "ClusterQueue")} == set(TEAMS)
    for namespace in TEAMS.values():
        single = yaml.safe_load((out / "templates" / namespace / "single-node.yaml").read_text())
        assert single["kind"] == "Job"
        env = {
            e["name"]: e.get("value")
            for e in single["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        # The bucket is the stack's, the prefix the team's.
        assert env["CHECKPOINT_URI"].startswith("s3://")
        multi = list(
            yaml.safe_load_all((out / "templates" / namespace / "multi-node.yaml").read_text())
        )
        assert [doc["kind"] for doc in multi] == ["Service", "Job"]
    quota = {
        q["metadata"]["namespace"]: q["spec"]["hard"] for q in by_kind(rendered, "ResourceQuota")
    }
    # The namespace quota never stops what Kueue admits.
    for team in PROD.teams:
        gpus = int(quota[team.namespace]["requests.nvidia.com/gpu"])
        assert gpus >= team.spot_gpus + team.on_demand_gpus


def test_priorities_protect_services(prod_render: tuple[Rendered, Path]) -> None:
    rendered, _ = prod_render
    classes = {pc["metadata"]["name"]: pc for pc in by_kind(rendered, "PriorityClass")}
    services = classes["services-critical"]["value"]
    standard = classes["training-standard"]["value"]
    preemptible = classes["training-preemptible"]
    assert services > standard > preemptible["value"]
    assert preemptible["preemptionPolicy"] == "Never"
    assert not any(pc.get("globalDefault") for pc in classes.values())


def test_helm_releases_are_pinned_and_use_real_chart_values(
    prod_render: tuple[Rendered, Path], shared_schemas: Path
) -> None:
    rendered, out = prod_render
    releases = {r["name"]: r for r in rendered.releases}
    nth = releases["aws-node-termination-handler"]
    assert (nth["chart"], nth["version"]) == ("aws-node-termination-handler", "0.27.6")
    assert nth["values"]["enableSqsTerminationDraining"] is True
    assert nth["values"]["queueURL"].startswith(f"https://sqs.{PROD.region}.amazonaws.com/")
    chart = yaml.safe_load(
        (shared_schemas / "aws-node-termination-handler-chart-0.27.6" / "values.yaml").read_text()
    )
    unknown = list(unknown_keys(nth["values"], chart))
    assert unknown == []
    kueue = releases["kueue"]
    assert kueue["version"] == "0.19.2"
    config = yaml.safe_load(kueue["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["kind"] == "Configuration"
    written = yaml.safe_load((out / "helm" / "kueue" / "values.yaml").read_text())
    assert written == kueue["values"]


def test_chart_value_check_catches_a_typo() -> None:
    chart = {
        "enableSqsTerminationDraining": False,
        "serviceAccount": {"name": None, "annotations": {}},
    }
    values = {"enableSQSTerminationDraining": True, "serviceAccount": {"annotations": {"a": "b"}}}
    assert list(unknown_keys(values, chart)) == ["enableSQSTerminationDraining"]


def test_checkov_reports_no_failed_checks(prod_render: tuple[Rendered, Path]) -> None:
    _, out = prod_render
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "checkov"),
            # The project's own checks (policies/checkov) as well as checkov's.
            "--external-checks-dir",
            str(REPO_ROOT / "policies" / "checkov"),
            "-d",
            str(out),
            "--framework",
            "kubernetes",
            "-o",
            "json",
            # Offline: no check metadata from the vendor's service.
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']})"
        for r in reports
        for c in r["results"]["failed_checks"]
    ]
    assert failed == []
    passed = {c["check_id"] for r in reports for c in r["results"]["passed_checks"]}
    # It really scanned the Job templates, with the project's own checks among checkov's.
    assert {"CKV_K8S_22", "CKV_K8S_43", "CKV_SPOT_1", "CKV_SPOT_3"} <= passed
    assert not any(r["results"]["skipped_checks"] for r in reports)


def test_prometheus_rule_holds_the_tested_rules(
    prod_render: tuple[Rendered, Path], tmp_path: Path
) -> None:
    rendered, _ = prod_render
    (rule,) = by_kind(rendered, "PrometheusRule")
    path = tmp_path / "deployed.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_shows_what_the_issue_asks(prod_render: tuple[Rendered, Path]) -> None:
    rendered, _ = prod_render
    (cm,) = [
        c
        for c in by_kind(rendered, "ConfigMap")
        if c["metadata"]["name"] == "spot-training-dashboard"
    ]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["spot-training.json"])
    titles = " | ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in (
        "interruption rate",
        "idle share",
        "pool utilisation",
        "checkpoint age",
        "lost steps",
        "savings",
    ):
        assert topic in titles
    savings = next(p for p in dashboard["panels"] if p["title"].startswith("Savings"))
    prices = PROD.kubernetes.monitoring
    saving = round(prices.on_demand_gpu_hour_usd - prices.spot_gpu_hour_usd, 6)
    assert savings["targets"][0]["expr"].endswith(f" * {saving}")


def test_cli_writes_the_files_and_rejects_an_unknown_stack(tmp_path: Path) -> None:
    spotctl = str(Path(sys.executable).parent / "spotctl")
    bad = subprocess.run(
        [spotctl, "render", "--stack", "nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert "no stack 'nope'" in bad.stderr
    assert "Traceback" not in bad.stderr
    not_dir = tmp_path / "file"
    not_dir.write_text("")
    clash = subprocess.run(
        [spotctl, "render", "--stack", "dev", "--out", str(not_dir)], capture_output=True, text=True
    )
    assert clash.returncode == 2
    assert "is not a directory" in clash.stderr


def test_strict_validation_catches_a_misspelt_field() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "x", "namespace": "team-a"},
        "spec": {
            "backofLimit": 3,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}},
        },
    }
    problems, _ = validate([job], KUBERNETES_VERSION)
    assert len(problems) == 1
    assert problems[0].startswith("Job team-a/x: spec:")
    assert "backofLimit" in problems[0]


def test_cli_renders_and_validates_dev(tmp_path: Path, shared_schemas: Path) -> None:
    spotctl = str(Path(sys.executable).parent / "spotctl")
    # Left over from an earlier render (a removed object) and a file of the user's own.
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "stale.yaml").write_text("kind: Gone\n")
    (tmp_path / "notes.txt").write_text("mine")
    result = subprocess.run(
        [spotctl, "render", "--stack", "dev", "--out", str(tmp_path), "--validate"]
        + ["--crds", str(shared_schemas)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "all validated objects are valid for Kubernetes 1.33" in result.stdout
    assert (tmp_path / "helm" / "kueue" / "values.yaml").is_file()
    assert not (tmp_path / "manifests" / "stale.yaml").exists()
    assert (tmp_path / "notes.txt").read_text() == "mine"
    names = sorted(p.name for p in (tmp_path / "manifests").iterdir())
    # Numbered in apply order: namespaces before what lives in them.
    assert names[0].startswith("010-namespace-")
    assert names.index(next(n for n in names if "-localqueue-" in n)) > names.index(
        next(n for n in names if "-clusterqueue-" in n)
    )
    missing = subprocess.run(
        [spotctl, "render", "--stack", "dev", "--out", str(tmp_path), "--validate"]
        + ["--crds", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert "--crds directory not found" in missing.stderr
