"""The order one `pulumi up` brings a stack up in, read from its preview's dependency graph (what
`spotctl preview --json` writes as `dependencies`): no custom resource before the release that
installs its CRD, no namespaced object before its namespace, no Helm release before the stable
nodes it schedules on, none that runs on GPU nodes before the NodePools that launch them, and no
GKE ComputeClass before the node pools it orders."""

from __future__ import annotations

import dataclasses
import json

import pytest
from dependency_graph import DependencyGraph
from stack_files import AWS_STACKS, GCP_STACKS, STACKS, charts_of, stack_values

from components.pools import GPU_CLASS_LABEL, POOL_LABEL
from components.versions import CHARTS
from spotctl.preview.resources import PreviewResource

RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
# Namespaces every cluster has from the start.
BUILT_IN_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
# API group of a CRD -> the chart that installs it.
CRD_CHARTS = {group: chart.name for chart in CHARTS for group in chart.crd_groups}
MONITORS = "monitoring.coreos.com"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
# API groups the cluster itself serves (GKE's ComputeClass): no release installs them.
CLUSTER_GROUPS = {"cloud.google.com", "monitoring.googleapis.com"}
COMPUTE_CLASS = "kubernetes:cloud.google.com/v1:ComputeClass"
GKE_NODE_POOL = "gcp:container/nodePool:NodePool"


def kubernetes_objects(resources: list[PreviewResource]) -> list[PreviewResource]:
    return [r for r in resources if r.custom and r.type.startswith("kubernetes:")]


def releases(resources: list[PreviewResource]) -> dict[str, PreviewResource]:
    return {r.inputs["name"]: r for r in resources if r.type == RELEASE}


def custom_resource_groups(resource: PreviewResource) -> set[str]:
    """API groups of the custom resources this object is, or (a release) its chart creates."""
    if resource.type == RELEASE:
        values = resource.inputs.get("values", {})
        monitor = values.get("serviceMonitor", {})
        creates_monitors = (
            values.get("enablePrometheus") or monitor.get("create") or monitor.get("enabled")
        )
        return {MONITORS} if creates_monitors else set()
    group = resource.inputs.get("apiVersion", "").rpartition("/")[0]
    return {group} if "." in group and not group.endswith(".k8s.io") else set()


def crd_problems(resources: list[PreviewResource]) -> list[str]:
    graph, installed = DependencyGraph(resources), releases(resources)
    problems = []
    for resource in kubernetes_objects(resources):
        for group in custom_resource_groups(resource) - CLUSTER_GROUPS:
            release = installed.get(CRD_CHARTS.get(group, ""))
            if release is None:
                problems.append(f"{resource.name}: no release in the stack installs {group}")
            elif not graph.waits_for(resource, release):
                problems.append(f"{resource.name} can be created before {release.name} ({group})")
    return problems


def namespace_problems(resources: list[PreviewResource]) -> list[str]:
    graph = DependencyGraph(resources)
    creators: dict[str, list[PreviewResource]] = {}
    for resource in kubernetes_objects(resources):
        if resource.type == NAMESPACE:
            creators.setdefault(resource.inputs["metadata"]["name"], []).append(resource)
        elif resource.type == RELEASE and resource.inputs.get("createNamespace"):
            creators.setdefault(resource.inputs["namespace"], []).append(resource)
    problems = []
    for resource in kubernetes_objects(resources):
        if resource.type == RELEASE:
            namespace = resource.inputs["namespace"]
        else:
            namespace = resource.inputs.get("metadata", {}).get("namespace")
        if namespace is None or namespace in BUILT_IN_NAMESPACES:
            continue
        own = creators.get(namespace, [])
        if resource not in own and not any(graph.waits_for(resource, c) for c in own):
            problems.append(f"{resource.name} can be created before namespace {namespace}")
    return problems


def stable_nodes(resources: list[PreviewResource]) -> PreviewResource:
    (stable,) = [
        r
        for r in resources
        if (r.type == "aws:eks/nodeGroup:NodeGroup" and r.inputs["labels"][POOL_LABEL] == "stable")
        or (r.type == GKE_NODE_POOL and r.inputs["nodeConfig"]["labels"][POOL_LABEL] == "stable")
    ]
    return stable


def release_problems(resources: list[PreviewResource]) -> list[str]:
    graph, stable = DependencyGraph(resources), stable_nodes(resources)
    return [
        f"{release.name} can be installed before the stable nodes"
        for release in releases(resources).values()
        if not graph.waits_for(release, stable)
    ]


def compute_class_problems(resources: list[PreviewResource]) -> list[str]:
    """A ComputeClass names node pools; it must not exist before them."""
    graph = DependencyGraph(resources)
    pools = {r.inputs.get("name"): r for r in resources if r.type == GKE_NODE_POOL}
    problems = []
    for compute_class in (r for r in resources if r.type == COMPUTE_CLASS):
        for priority in compute_class.inputs["spec"]["priorities"]:
            for name in priority["nodepools"]:
                pool = pools.get(name)
                if pool is None:
                    problems.append(f"{compute_class.name} names node pool {name!r}, not here")
                elif not graph.waits_for(compute_class, pool):
                    problems.append(f"{compute_class.name} can be created before {pool.name}")
    return problems


def on_gpu_nodes(release: PreviewResource) -> bool:
    return GPU_CLASS_LABEL in json.dumps(release.inputs.get("values", {}).get("affinity", {}))


def gpu_release_problems(resources: list[PreviewResource]) -> list[str]:
    graph = DependencyGraph(resources)
    node_pools = [r for r in resources if r.type == NODE_POOL]
    return [
        f"{release.name} can be installed before {pool.name}"
        for release in releases(resources).values()
        if on_gpu_nodes(release)
        for pool in node_pools
        if not graph.waits_for(release, pool)
    ]


@pytest.fixture(scope="module", params=STACKS)
def stack(request, stack_previews) -> tuple[str, list[PreviewResource]]:
    return request.param, stack_previews(request.param)


@pytest.fixture
def previewed(stack) -> list[PreviewResource]:
    return stack[1]


@pytest.fixture
def cloud(stack) -> str:
    return stack_values(stack[0])["cloud"]


def test_custom_resources_wait_for_the_release_of_their_crd(previewed, cloud):
    checked = [r for r in kubernetes_objects(previewed) if custom_resource_groups(r)]
    # Kueue's objects, the rules and monitors, the releases that create monitors, and on EKS
    # Karpenter's objects; on GKE the ComputeClasses.
    assert len(checked) >= {"aws": 12, "gcp": 9}[cloud]
    assert crd_problems(previewed) == []


def test_namespaced_objects_wait_for_their_namespace(previewed):
    assert namespace_problems(previewed) == []


def test_helm_releases_wait_for_the_stable_nodes(stack, previewed):
    assert set(releases(previewed)) == charts_of(stack[0])
    assert release_problems(previewed) == []


@pytest.mark.parametrize("stack", AWS_STACKS, indirect=True)
def test_gpu_agents_wait_for_the_node_pools_that_launch_their_nodes(previewed):
    on_gpus = {name for name, release in releases(previewed).items() if on_gpu_nodes(release)}
    assert on_gpus == {"nvidia-device-plugin"}
    assert [r for r in previewed if r.type == NODE_POOL]
    assert gpu_release_problems(previewed) == []


@pytest.mark.parametrize("stack", GCP_STACKS, indirect=True)
def test_compute_classes_wait_for_the_node_pools_they_order(previewed):
    assert not any(on_gpu_nodes(release) for release in releases(previewed).values())
    assert [r for r in previewed if r.type == COMPUTE_CLASS]
    assert compute_class_problems(previewed) == []


def _cut(resources: list[PreviewResource], name: str) -> list[PreviewResource]:
    """The stack with one resource's every edge removed but its place in the tree's root."""
    root = next(r.urn for r in resources if r.parent is None)
    return [
        dataclasses.replace(r, dependencies=[], parent=root) if r.name == name else r
        for r in resources
    ]


@pytest.mark.parametrize(
    ("name", "check", "problem"),
    [
        ("-alerts-rules", crd_problems, "can be created before {env}-monitoring-release"),
        ("-karpenter-controller", crd_problems, "can be created before {env}-monitoring-release"),
        ("-spot-nodepool", crd_problems, "can be created before {env}-karpenter-crd"),
        ("-kueue-lq-", crd_problems, "can be created before {env}-kueue-kueue"),
        ("-dashboard-configmap", namespace_problems, "before namespace monitoring"),
        ("-templates-configmap", namespace_problems, "before namespace "),
        ("-monitoring-release", release_problems, "before the stable nodes"),
        ("-gpus-device-plugin", gpu_release_problems, "before {env}-karpenter-"),
    ],
)
@pytest.mark.parametrize("stack", AWS_STACKS, indirect=True)
def test_each_check_catches_a_missing_edge(stack, name, check, problem):
    env, resources = stack
    target = next(r.name for r in kubernetes_objects(resources) if name in r.name)
    found = check(_cut(resources, target))
    assert any(target in p and problem.format(env=env) in p for p in found), found


@pytest.mark.parametrize("stack", GCP_STACKS, indirect=True)
def test_the_compute_class_check_catches_a_missing_edge(stack):
    _, resources = stack
    target = next(r.name for r in resources if r.type == COMPUTE_CLASS)
    found = compute_class_problems(_cut(resources, target))
    assert found and all(target in p and "can be created before" in p for p in found)
