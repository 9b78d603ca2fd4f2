"""Where pods can run, over every node pool of every stack: each extended resource a training pod
requests is advertised there by a device plugin the platform installs, and no platform pod that
is not a DaemonSet can ever be scheduled on a GPU node (it would keep the node from ever being
reclaimed as empty).

Chart defaults come from the charts' own values.yaml in shared/schemas (kube-prometheus-stack
88.5.3, Karpenter 1.14.1, the EFA device plugin v0.5.30); Kueue's from its chart README (0.19.2:
`controllerManager.nodeSelector` {} and `tolerations` []); CoreDNS's tolerations are those of the
EKS add-on's Deployment (CriticalAddonsOnly, the control-plane taint).
"""

from __future__ import annotations

import copy
import json
from functools import cache

import pytest
import yaml
from chart_values import merged, unknown_keys
from stack_files import AWS_STACKS, STACKS, stack_values

from components.catalog import catalog
from components.k8s.gpus import INSTANCE_TYPE_LABEL
from components.versions import (
    EFA_DEVICE_PLUGIN,
    KARPENTER,
    KARPENTER_CRD,
    KUBE_PROMETHEUS_STACK,
    KUEUE,
    NVIDIA_DEVICE_PLUGIN,
)
from spotctl.render.manifests import Rendered, render, scheduling_problems
from spotctl.render.scheduling import NodeShape, fits, pod_specs

STABLE = "stable"
# What a stable node is labelled, on both clouds (components/pools.py).
POOL_LABEL = "node-pool"
# Charts that run only DaemonSets, or CRDs: no pod of theirs is a platform Deployment.
DAEMONSETS_ONLY = {NVIDIA_DEVICE_PLUGIN.chart, EFA_DEVICE_PLUGIN.chart}
# Per chart, the values under which each of its non-DaemonSet workloads takes its nodeSelector,
# affinity and tolerations ("" for the top level).
WORKLOADS = {
    KUBE_PROMETHEUS_STACK.chart: (
        "prometheus.prometheusSpec",
        "alertmanager.alertmanagerSpec",
        "prometheusOperator",
        "prometheusOperator.admissionWebhooks.patch",
        "grafana",
        "kube-state-metrics",
    ),
    KUEUE.chart: ("controllerManager",),
    KARPENTER.chart: ("",),
    KARPENTER_CRD.chart: (),
}
CHART_DEFAULTS = {
    KUBE_PROMETHEUS_STACK.chart: "kube-prometheus-stack-88.5.3",
    KARPENTER.chart: "karpenter-v1.14.1",
}
COREDNS_TOLERATIONS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
]


@pytest.fixture(scope="module")
def rendered(stack_previews):
    return cache(lambda stack: render(stack_previews(stack)))


def _at(values: dict, path: str) -> dict:
    for key in filter(None, path.split(".")):
        values = values.get(key) or {}
    return values


def _defaults(shared_schemas, chart: str) -> dict:
    folder = CHART_DEFAULTS.get(chart)
    if folder is None:
        return {}
    return yaml.safe_load((shared_schemas / folder / "values.yaml").read_text())


def platform_pods(stack, stack_previews, rendered, shared_schemas) -> dict[str, dict]:
    """Name -> pod spec of every non-DaemonSet pod the platform runs, outside the templates."""
    pods = {}
    result: Rendered = rendered(stack)
    for obj in result.objects:
        if obj["kind"] != "DaemonSet":
            for path, pod in pod_specs(obj):
                meta = obj["metadata"]
                pods[f"{obj['kind']} {meta.get('namespace')}/{meta['name']} {path}"] = pod
    for release in result.releases:
        chart = release["chart"]
        if chart in DAEMONSETS_ONLY:
            continue
        assert chart in WORKLOADS, f"say where the workloads of {chart} take their placement"
        values = merged(_defaults(shared_schemas, chart), release["values"])
        for path in WORKLOADS[chart]:
            placement = _at(values, path)
            pods[f"{release['name']} {path or '(top level)'}"] = {
                key: placement.get(key) for key in ("nodeSelector", "affinity", "tolerations")
            }
    for resource in stack_previews(stack):
        if resource.type == "aws:eks/addon:Addon" and resource.inputs["addonName"] == "coredns":
            configuration = json.loads(resource.inputs.get("configurationValues") or "{}")
            pods["coredns"] = {
                "nodeSelector": configuration.get("nodeSelector"),
                "tolerations": COREDNS_TOLERATIONS,
            }
    return pods


@pytest.mark.parametrize("stack", STACKS)
def test_no_platform_pod_can_run_on_a_gpu_node(
    stack, stack_previews, rendered, shared_schemas
) -> None:
    nodes = rendered(stack).nodes
    gpu_nodes = [n for n in nodes if n.gpus]
    assert gpu_nodes and any(n.labels.get(POOL_LABEL) == STABLE for n in nodes)
    pods = platform_pods(stack, stack_previews, rendered, shared_schemas)
    # Kueue, monitoring, the rendezvous stores, and on EKS Karpenter and CoreDNS.
    assert len(pods) >= {"aws": 10, "gcp": 8}[stack_values(stack)["cloud"]]
    for name, pod in pods.items():
        landing = {n.pool for n in nodes if fits(pod, n)}
        assert not [n.pool for n in gpu_nodes if fits(pod, n)], name
        # Pinned to the stable tier: nowhere else, and there.
        assert landing and all(n.labels.get(POOL_LABEL) == STABLE for n in nodes if fits(pod, n)), (
            name,
            landing,
        )


def test_an_untainted_gpu_node_is_found(stack_previews, rendered, shared_schemas) -> None:
    """The check sees what the taint prevents: take the taint off the on-demand GPU nodes and
    the pods that only the taint kept away land there."""
    nodes = rendered("prod").nodes
    untainted = [
        NodeShape(n.pool, n.labels, (), n.gpus) for n in nodes if n.pool.endswith("-on-demand")
    ]
    pods = platform_pods("prod", stack_previews, rendered, shared_schemas)
    # The admission webhook's patch Job has no selector: only the taint keeps it off.
    patch = pods["kube-prometheus-stack prometheusOperator.admissionWebhooks.patch"]
    assert any(fits(patch, n) for n in untainted)
    assert not any(fits(pods["coredns"], n) for n in untainted)  # pinned by its selector


@pytest.mark.parametrize("stack", STACKS)
def test_every_extended_resource_is_advertised_where_its_pods_run(stack, rendered) -> None:
    result = rendered(stack)
    requested = {
        name
        for obj in result.all_objects()
        for _, pod in pod_specs(obj)
        for container in pod.get("containers", [])
        for name in container.get("resources", {}).get("limits", {})
    }
    assert "nvidia.com/gpu" in requested
    assert scheduling_problems(result) == []


def test_prod_s_multi_node_templates_get_efa_from_the_plugin(rendered) -> None:
    result = rendered("prod")
    efa = [
        obj
        for obj in result.all_objects()
        for _, pod in pod_specs(obj)
        if "vpc.amazonaws.com/efa" in pod["containers"][0]["resources"].get("limits", {})
    ]
    assert efa, "prod's multi-node templates request EFA"
    (plugin,) = [r for r in result.releases if r["chart"] == EFA_DEVICE_PLUGIN.chart]
    # Without the plugin, nothing advertises EFA: one line per template, naming the field.
    without = copy.copy(result)
    without.releases = [r for r in result.releases if r is not plugin]
    problems = scheduling_problems(without)
    assert len(problems) == len(efa)
    assert all(
        ".containers[0].resources.limits.vpc.amazonaws.com/efa: no device plugin the platform "
        "installs advertises vpc.amazonaws.com/efa on " in line
        for line in problems
    ), problems


def test_a_resource_no_plugin_serves_is_refused(rendered) -> None:
    result = copy.copy(rendered("dev"))
    job = copy.deepcopy(next(o for o in result.all_objects() if o["kind"] == "Job"))
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["example.com/fpga"] = 1
    result.templates = {("research", "fpga.yaml"): [job]}
    (line,) = scheduling_problems(result)
    assert line.startswith(f"Job {job['metadata']['namespace']}/{job['metadata']['name']}: ")
    assert "spec.template.spec.containers[0].resources.limits.example.com/fpga" in line
    assert "a10g-24gb-spot (g5.xlarge)" in line


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_efa_plugin_s_values_are_its_chart_s(stack, rendered, shared_schemas) -> None:
    chart = yaml.safe_load(
        (shared_schemas / "aws-efa-k8s-device-plugin-chart-v0.5.30" / "values.yaml").read_text()
    )
    for release in rendered(stack).releases:
        if release["chart"] == EFA_DEVICE_PLUGIN.chart:
            assert list(unknown_keys(release["values"], chart)) == []
            listed = release["values"]["supportedInstanceLabels"]
            assert listed["keys"] == [INSTANCE_TYPE_LABEL]
            assert set(listed["values"]) <= set(chart["supportedInstanceLabels"]["values"])


def test_the_catalog_s_efa_types_are_the_ones_aws_lists(shared_schemas) -> None:
    """The EFA device plugin chart lists the instance types with EFA (from the EC2 user guide's
    supported instance types); the catalog agrees with it on every type it holds."""
    chart = yaml.safe_load(
        (shared_schemas / "aws-efa-k8s-device-plugin-chart-v0.5.30" / "values.yaml").read_text()
    )
    with_efa = set(chart["supportedInstanceLabels"]["values"])
    types = catalog("aws").instance_types
    disagree = sorted(name for name, t in types.items() if (t.efa > 0) != (name in with_efa))
    assert disagree == []
    assert types["p5.4xlarge"].efa == 1 and types["p5.48xlarge"].efa == 32


def test_fits_reads_taints_and_affinity_as_the_scheduler_does() -> None:
    """The TaintToleration and NodeAffinity filters (kubernetes.io/docs: Taints and Tolerations,
    Assigning Pods to Nodes)."""
    gpu = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    soft = {"key": "hint", "value": "x", "effect": "PreferNoSchedule"}
    node = NodeShape("p", {"gpu-class": "a", "size": "8"}, (gpu, soft), True)
    assert not fits({}, node)  # a NoSchedule taint repels; PreferNoSchedule does not
    assert fits({"tolerations": [{"operator": "Exists"}]}, node)  # tolerates everything
    assert fits({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, node)
    equal = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}
    assert fits({"tolerations": [equal]}, node)
    assert not fits({"tolerations": [{**equal, "value": "absent"}]}, node)
    assert not fits({"tolerations": [{**equal, "effect": "NoExecute"}]}, node)
    tolerant = {"tolerations": [equal]}

    def affinity(*expressions) -> dict:
        terms = [{"matchExpressions": list(expressions)}]
        required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        return {**tolerant, "affinity": {"nodeAffinity": required}}

    assert fits(affinity({"key": "size", "operator": "Gt", "values": ["4"]}), node)
    assert not fits(affinity({"key": "size", "operator": "Lt", "values": ["4"]}), node)
    assert not fits(affinity({"key": "gpu-class", "operator": "NotIn", "values": ["a"]}), node)
    assert fits(affinity({"key": "spot", "operator": "DoesNotExist"}), node)
    assert not fits({**tolerant, "nodeSelector": {"gpu-class": "b"}}, node)
