"""`spotctl render` of the prod stack: complete, valid and checkov-clean."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import yaml
from chart_values import unknown_keys
from checkov_run import checkov
from stack_files import REPO_ROOT, stack_values

from components.config import load_config
from components.k8s import monitoring
from components.k8s.jobs import MAX_LOCAL_RANKS, metrics_ports
from components.versions import KUBERNETES_VERSION
from spotctl.outputs import LEDGER
from spotctl.render.manifests import Rendered, validate

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
        multi = yaml.safe_load((out / "templates" / namespace / "multi-node.yaml").read_text())
        assert multi["kind"] == "Job"
    quota = {
        q["metadata"]["namespace"]: q["spec"]["hard"] for q in by_kind(rendered, "ResourceQuota")
    }
    # The namespace quota never stops what Kueue admits.
    for team in PROD.teams:
        gpus = int(quota[team.namespace]["requests.nvidia.com/gpu"])
        assert gpus >= sum(q.spot_gpus + q.on_demand_gpus for q in team.quotas.values())


def test_each_team_has_a_rendezvous_store_on_the_stable_tier(
    prod_render: tuple[Rendered, Path],
) -> None:
    rendered, out = prod_render
    stores = {d["metadata"]["namespace"]: d for d in by_kind(rendered, "Deployment")}
    services = {s["metadata"]["namespace"]: s for s in by_kind(rendered, "Service")}
    quotas = {
        q["metadata"]["namespace"]: q["spec"]["hard"] for q in by_kind(rendered, "ResourceQuota")
    }
    queues = {
        q["spec"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]: q
        for q in by_kind(rendered, "ClusterQueue")
    }
    assert set(stores) == set(services) == set(TEAMS.values())
    for namespace in TEAMS.values():
        store, service = stores[namespace], services[namespace]
        pod = store["spec"]["template"]
        assert pod["spec"]["nodeSelector"] == {"node-pool": "stable"}
        assert pod["spec"]["priorityClassName"] == "services-critical"
        assert not pod["spec"]["tolerations"]
        assert store["spec"]["strategy"] == {"type": "Recreate"}  # never two stores at once
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        # The team's multi-node template meets there, and runs the same image.
        job = yaml.safe_load((out / "templates" / namespace / "multi-node.yaml").read_text())
        trainer = job["spec"]["template"]["spec"]["containers"][0]
        [port] = service["spec"]["ports"]
        endpoint = f"{service['metadata']['name']}.{namespace}.svc:{port['port']}"
        assert f"--rdzv-endpoint={endpoint}" in trainer["command"]
        assert pod["spec"]["containers"][0]["image"] == trainer["image"]
        # The namespace quota holds what Kueue may admit and the store besides.
        admissible = sum(
            r["nominalQuota"] + r.get("borrowingLimit", 0)
            for flavor in queues[namespace]["spec"]["resourceGroups"][0]["flavors"]
            for r in flavor["resources"]
            if r["name"] == "cpu"
        )
        store_cpu = pod["spec"]["containers"][0]["resources"]["requests"]["cpu"]
        assert _milli(quotas[namespace]["requests.cpu"]) == admissible * 1000 + _milli(store_cpu)


def test_every_local_rank_is_scraped_through_the_network_policy(
    prod_render: tuple[Rendered, Path],
) -> None:
    rendered, out = prod_render
    (monitor,) = by_kind(rendered, "PodMonitor")
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    [keep] = [r for r in endpoint["relabelings"] if r.get("action") == "keep"]
    assert keep["sourceLabels"] == ["__meta_kubernetes_pod_container_port_name"]
    policies = {p["metadata"]["namespace"]: p for p in by_kind(rendered, "NetworkPolicy")}
    for namespace in TEAMS.values():
        job = yaml.safe_load((out / "templates" / namespace / "multi-node.yaml").read_text())
        ports = job["spec"]["template"]["spec"]["containers"][0]["ports"]
        assert len(ports) == max(PROD.kubernetes.templates.gpus_per_node, 1)
        # A node with the most GPUs a pod may have, one rank each.
        ports += metrics_ports(MAX_LOCAL_RANKS)
        # Prometheus anchors the regex: every rank's port is kept, nothing else.
        assert all(re.fullmatch(keep["regex"], p["name"]) for p in ports)
        assert not re.fullmatch(keep["regex"], "rendezvous")
        [from_monitoring] = [
            rule
            for rule in policies[namespace]["spec"]["ingress"]
            if "namespaceSelector" in rule["from"][0]
        ]
        [opened] = from_monitoring["ports"]
        assert all(opened["port"] <= p["containerPort"] <= opened["endPort"] for p in ports)


def _milli(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000


def test_the_docs_show_what_rendering_prod_prints(prod_render: tuple[Rendered, Path]) -> None:
    rendered, out = prod_render
    docs = (REPO_ROOT / "docs" / "kubernetes.md").read_text()
    console = docs.split("```console\n", 1)[1].split("```", 1)[0].splitlines()
    files = sum(1 for path in out.rglob("*") if path.is_file())
    assert console[0] == (
        f"wrote {files} files to out/prod: {len(rendered.objects)} objects, "
        f"{len(rendered.releases)} Helm releases, {len(rendered.templates)} Job templates"
    )


def test_priorities_protect_services(prod_render: tuple[Rendered, Path]) -> None:
    rendered, _ = prod_render
    classes = {pc["metadata"]["name"]: pc for pc in by_kind(rendered, "PriorityClass")}
    services = classes["services-critical"]["value"]
    standard = classes["training-standard"]["value"]
    preemptible = classes["training-preemptible"]
    assert services > standard > preemptible["value"]
    assert preemptible["preemptionPolicy"] == "Never"
    assert not any(pc.get("globalDefault") for pc in classes.values())


def chart_values(shared_schemas: Path, folder: str) -> dict:
    return yaml.safe_load((shared_schemas / folder / "values.yaml").read_text())


def test_helm_releases_are_pinned_and_use_real_chart_values(
    prod_render: tuple[Rendered, Path], shared_schemas: Path
) -> None:
    rendered, out = prod_render
    releases = {r["name"]: r for r in rendered.releases}
    assert set(releases) == {
        "kube-prometheus-stack",
        "karpenter-crd",
        "karpenter",
        "nvidia-device-plugin",
        "aws-efa-k8s-device-plugin",
        "kueue",
    }
    karpenter = releases["karpenter"]
    assert (karpenter["chart"], karpenter["version"]) == (
        "oci://public.ecr.aws/karpenter/karpenter",
        "1.14.1",
    )
    assert releases["karpenter-crd"]["version"] == "1.14.1"
    chart = yaml.safe_load((shared_schemas / "karpenter-v1.14.1" / "Chart.yaml").read_text())
    assert chart["version"] == karpenter["version"]
    assert (
        list(unknown_keys(karpenter["values"], chart_values(shared_schemas, "karpenter-v1.14.1")))
        == []
    )
    settings = karpenter["values"]["settings"]
    # Karpenter reads the stack's interruption queue; nothing else does.
    assert settings["interruptionQueue"].startswith("prod-interruptions-queue")
    assert settings["clusterName"] == PROD.aws.cluster.create.name
    # The controller runs on the stable managed node group, and is told its region: with the
    # hop limit of 1 it cannot ask IMDS.
    assert karpenter["values"]["nodeSelector"]["node-pool"] == "stable"
    assert {"name": "AWS_REGION", "value": PROD.region} in karpenter["values"]["controller"]["env"]
    plugin = releases["nvidia-device-plugin"]
    assert plugin["version"] == "0.20.0"
    assert (
        list(
            unknown_keys(
                plugin["values"], chart_values(shared_schemas, "nvidia-device-plugin-v0.20.0")
            )
        )
        == []
    )
    # Spot GPU nodes are tainted: without this toleration they would expose no GPUs.
    assert {
        "key": "capacity-type",
        "operator": "Equal",
        "value": "spot",
        "effect": "NoSchedule",
    } in (plugin["values"]["tolerations"])
    kueue = releases["kueue"]
    assert kueue["version"] == "0.19.2"
    config = yaml.safe_load(kueue["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["kind"] == "Configuration"
    written = yaml.safe_load((out / "helm" / "kueue" / "values.yaml").read_text())
    assert written == kueue["values"]


def test_chart_value_check_catches_a_typo() -> None:
    chart = {
        "settings": {"interruptionQueue": ""},
        "serviceAccount": {"annotations": {}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
    }
    values = {
        "settings": {"interruptionQueu": "q"},
        "serviceAccount": {"annotations": {"a": "b"}},
        "nodeSelector": {"node-pool": "stable"},
    }
    assert list(unknown_keys(values, chart)) == ["settings.interruptionQueu"]


def test_checkov_reports_no_failed_checks(prod_render: tuple[Rendered, Path]) -> None:
    _, out = prod_render
    # The project's own checks (policies/checkov) as well as checkov's.
    result = checkov("-d", str(out), "--framework", "kubernetes")
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
    assert {"CKV_K8S_22", "CKV_K8S_43", "CKV_SPOT_1", "CKV_SPOT_3", "CKV_SPOT_5"} <= passed
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
    # Left over from an earlier render (a removed object, in the render's ledger) and a file of
    # the user's own, which only --force writes beside.
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "stale.yaml").write_text("kind: Gone\n")
    (tmp_path / LEDGER).write_text("manifests/stale.yaml\n")
    (tmp_path / "notes.txt").write_text("mine")
    result = subprocess.run(
        [spotctl, "render", "--stack", "dev", "--out", str(tmp_path), "--validate", "--force"]
        + ["--crds", str(shared_schemas)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert f"all validated objects are valid for Kubernetes {KUBERNETES_VERSION}" in result.stdout
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
