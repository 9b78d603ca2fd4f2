"""The Kubernetes layer on GKE, read from the GCP stacks' renders: a ComputeClass per GPU class
orders its spot pools before its on-demand pools, Kueue's flavors and the Job templates select it,
the notice budget follows the Spot pools' shutdown grace, and GKE's own GPU plumbing replaces the
charts the EKS side installs."""

from __future__ import annotations

import json

import jsonschema
import pytest
from stack_files import GCP_STACKS, stack_values

from components.catalog import catalog, class_name
from components.config import load_config
from components.gcp.computeclass import COMPUTE_CLASS_LABEL
from components.pools import GPU_CLASS_LABEL, SPOT_TAINT
from spotctl.render.manifests import Rendered, render, validate

SCHEMA = "gke/computeclass_v1.json"


@pytest.fixture(scope="module", params=GCP_STACKS)
def stack(request, stack_previews) -> tuple[str, list, Rendered]:
    resources = stack_previews(request.param)
    return request.param, resources, render(resources)


def of_kind(rendered: Rendered, kind: str) -> list[dict]:
    return [o for o in rendered.all_objects() if o["kind"] == kind]


def jobs(rendered: Rendered) -> list[dict]:
    return [d for docs in rendered.templates.values() for d in docs if d["kind"] == "Job"]


def buffers_of(config, gpu_class: str) -> list:
    """The stack's buffer pool if it is of this GPU class."""
    buffer = config.gcp.buffer_pool
    if buffer is None:
        return []
    machine = catalog("gcp").instance_types[buffer.machine_type]
    return [buffer] if machine.accelerator and class_name(machine.accelerator) == gpu_class else []


def test_each_class_orders_its_buffer_then_its_spot_then_its_on_demand_pools(stack, shared_schemas):
    name, resources, rendered = stack
    config = load_config(stack_values(name))
    schema = json.loads((shared_schemas / SCHEMA).read_text())
    pools = {
        r.inputs["name"]: r.inputs["nodeConfig"]
        for r in resources
        if r.type == "gcp:container/nodePool:NodePool" and "name" in r.inputs
    }
    classes = {o["metadata"]["name"]: o for o in of_kind(rendered, "ComputeClass")}
    assert set(classes) == {c.name for c in config.gpu_classes}
    for gpu_class in config.gpu_classes:
        compute_class = classes[gpu_class.name]
        jsonschema.validate(compute_class, schema)
        spec = compute_class["spec"]
        assert spec["whenUnsatisfiable"] == "DoNotScaleUp"
        assert spec["nodePoolAutoCreation"] == {"enabled": False}
        assert spec["activeMigration"] == {"optimizeRulePriority": config.gcp.active_migration}
        *buffer, spot, on_demand = (p["nodepools"] for p in spec["priorities"])
        assert len(spot) == len(on_demand) == len(gpu_class.instance_types)
        # A GPU buffer of the class comes first: its nodes are paid for by the schedule.
        assert buffer == [[f"buffer-{b.machine_type}"] for b in buffers_of(config, gpu_class.name)]
        for names, is_spot in [*((b, False) for b in buffer), (spot, True), (on_demand, False)]:
            for pool_name in names:
                node = pools[pool_name]
                assert node["spot"] is is_spot
                assert node["labels"][COMPUTE_CLASS_LABEL] == gpu_class.name
                assert {
                    "key": COMPUTE_CLASS_LABEL,
                    "value": gpu_class.name,
                    "effect": "NO_SCHEDULE",
                } in node["taints"]


def test_a_compute_class_gke_would_refuse_is_caught(stack, shared_schemas):
    _, _, rendered = stack
    compute_class = of_kind(rendered, "ComputeClass")[0]
    broken = {**compute_class, "spec": {**compute_class["spec"], "whenUnsatisfiable": "Wait"}}
    problems, _ = validate([broken], "1.33", [shared_schemas])
    assert len(problems) == 1 and "spec.whenUnsatisfiable" in problems[0], problems


def test_flavors_and_templates_select_the_class_and_its_compute_class(stack):
    _, _, rendered = stack
    compute_class_toleration = {"key": COMPUTE_CLASS_LABEL, "operator": "Equal"}
    for flavor in of_kind(rendered, "ResourceFlavor"):
        spec = flavor["spec"]
        gpu_class = spec["nodeLabels"][GPU_CLASS_LABEL]
        assert spec["nodeLabels"][COMPUTE_CLASS_LABEL] == gpu_class
        assert {**compute_class_toleration, "value": gpu_class, "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
    assert jobs(rendered)
    for job in jobs(rendered):
        pod = job["spec"]["template"]["spec"]
        gpu_class = pod["nodeSelector"][GPU_CLASS_LABEL]
        assert pod["nodeSelector"][COMPUTE_CLASS_LABEL] == gpu_class
        keys = {t["key"] for t in pod["tolerations"]}
        assert {SPOT_TAINT.key, COMPUTE_CLASS_LABEL} <= keys


def test_the_notice_budget_is_the_spot_pools_shutdown_grace(stack):
    name, _, rendered = stack
    config = load_config(stack_values(name))
    budget = config.gcp.spot_shutdown.user_pods_seconds
    for job in jobs(rendered):
        pod = job["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] == budget
        env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env", [])}
        assert env["SPOTSAFE_NOTICE_SOURCES"] == "sigterm,gce"
        assert env["SPOTSAFE_SIGTERM_GRACE_S"] == str(budget)
        assert env["SPOTSAFE_SIGTERM_LAG_S"] == "0"
        # The runtime's GCE deadline is the same grace, not the metadata server's 30 s.
        assert env["SPOTSAFE_GCE_NOTICE_S"] == str(budget)


def test_gke_brings_its_own_gpu_plumbing_and_no_provisioner(stack):
    name, resources, rendered = stack
    assert {r["name"] for r in rendered.releases} == {"kube-prometheus-stack", "kueue"}
    assert not [r for r in resources if r.type.startswith("kubernetes:karpenter")]
    clusters = [r for r in resources if r.type == "gcp:container/cluster:Cluster"]
    # An attached cluster keeps its owner's monitoring settings (docs/deploy-gcp.md, section 5).
    assert len(clusters) == (load_config(stack_values(name)).gcp.cluster.create is not None)
    for cluster in clusters:
        assert "DCGM" in cluster.inputs["monitoringConfig"]["enableComponents"]


def test_managed_prometheus_scrapes_every_rank_of_every_training_pod(stack):
    """Managed Service for Prometheus reads its own ClusterPodMonitoring, not the operator's
    PodMonitor (prometheus-engine's CRD: v1, at most 10 endpoints, each a port and interval)."""
    _, _, rendered = stack
    (monitoring,) = of_kind(rendered, "ClusterPodMonitoring")
    assert monitoring["apiVersion"] == "monitoring.googleapis.com/v1"
    spec = monitoring["spec"]
    assert 1 <= len(spec["endpoints"]) <= 10
    assert all(e["interval"] == "30s" for e in spec["endpoints"])
    assert spec["targetLabels"]["fromPod"] == [
        {"from": "batch.kubernetes.io/job-name", "to": "run"}
    ]
    scraped = {e["port"] for e in spec["endpoints"]}
    for job in jobs(rendered):
        template = job["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items()
        ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        assert ports <= scraped, job["metadata"]["name"]


def test_the_grafana_idle_panel_reads_allocation_not_dcgm(stack):
    """GKE's DCGM metrics go to Managed Service for Prometheus, not to the in-cluster one: the
    in-cluster panel counts allocatable GPUs no running pod holds (kube-state-metrics)."""
    _, _, rendered = stack
    (config_map,) = [
        c
        for c in of_kind(rendered, "ConfigMap")
        if c["metadata"]["name"] == "spot-training-dashboard"
    ]
    panels = json.loads(config_map["data"]["spot-training.json"])["panels"]
    (idle,) = [p for p in panels if p["title"].startswith("Accelerator idle share")]
    assert "kube_node_status_allocatable" in json.dumps(idle["targets"])
    assert "DCGM_FI_DEV_GPU_UTIL" not in json.dumps(panels)
