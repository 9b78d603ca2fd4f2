"""Where pods can run, read from a stack's preview as the Kubernetes scheduler would read it.

The stack's node pools (EKS managed node groups, Karpenter NodePools, GKE node pools) become node
shapes: the labels and taints a node of the pool carries, one shape per instance type. A pod fits a
shape when its nodeSelector and required node affinity match the labels and its tolerations cover
every NoSchedule and NoExecute taint (the scheduler's NodeAffinity and TaintToleration filters).

`unserved_resources` is the check `spotctl render --validate` runs: every extended resource a
training pod requests (`nvidia.com/gpu`, `vpc.amazonaws.com/efa`, ...) must be advertised, on every
node shape the pod fits, by a device plugin the platform installs, or the pod stays Pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from components.k8s.gpus import INSTANCE_TYPE_LABEL
from components.pools import GPU_TAINT
from components.versions import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN
from spotctl.preview.resources import PreviewResource

EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
# The providers spell taint effects in an enum of their own.
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": ""}
# Effects that keep a pod off a node (PreferNoSchedule only discourages).
REPELLING = ("NoSchedule", "NoExecute")
# Resources every node has; anything else a pod requests must be advertised by a device plugin.
NODE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
# Kinds whose objects hold pod templates (a JobSet's are in its replicated Jobs).
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "JobSet")
# GKE's node label naming the accelerator of a GPU node.
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"


@dataclass(frozen=True)
class NodeShape:
    """A node of a pool as the scheduler sees it."""

    pool: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...]
    gpus: bool


@dataclass(frozen=True)
class DevicePlugin:
    """A DaemonSet that advertises `resource` on the nodes its pod spec fits."""

    name: str
    resource: str
    pod: Mapping  # nodeSelector, affinity, tolerations


def _taint(taint: Mapping) -> dict[str, str]:
    effect = EFFECTS.get(taint["effect"], taint["effect"])
    return {"key": taint["key"], "value": taint.get("value", ""), "effect": effect}


def node_shapes(resources: Iterable[PreviewResource], objects: Iterable[dict]) -> list[NodeShape]:
    """Every kind of node the stack's pools can start: one shape per pool and instance type."""
    shapes = []
    # The kubelet labels every node with its OS (all the platform's nodes are Linux).
    labels_of_every_node = {"kubernetes.io/os": "linux"}
    for resource in resources:
        inputs = resource.inputs
        if resource.type == EKS_NODE_GROUP:
            gpus = "NVIDIA" in inputs.get("amiType", "")
            taints = tuple(_taint(t) for t in inputs.get("taints") or [])
            for instance_type in inputs["instanceTypes"]:
                labels = {
                    **labels_of_every_node,
                    **inputs.get("labels", {}),
                    INSTANCE_TYPE_LABEL: instance_type,
                }
                shapes.append(NodeShape(resource.name, labels, taints, gpus))
        elif resource.type == GKE_NODE_POOL:
            config = inputs["nodeConfig"]
            accelerators = config.get("guestAccelerators") or []
            labels = {
                **labels_of_every_node,
                **config.get("labels", {}),
                INSTANCE_TYPE_LABEL: config["machineType"],
            }
            taints = tuple(_taint(t) for t in config.get("taints") or [])
            if accelerators:
                # GKE labels a GPU node with its accelerator and taints it itself.
                labels[GKE_ACCELERATOR_LABEL] = accelerators[0]["type"]
                taints = (*taints, _taint(vars(GPU_TAINT)))
            shapes.append(NodeShape(resource.name, labels, taints, bool(accelerators)))
    for obj in objects:
        if obj["apiVersion"] == "karpenter.sh/v1" and obj["kind"] == "NodePool":
            template = obj["spec"]["template"]
            requirements = {r["key"]: r for r in template["spec"]["requirements"]}
            taints = tuple(_taint(t) for t in template["spec"].get("taints", []))
            for instance_type in requirements[INSTANCE_TYPE_LABEL]["values"]:
                labels = {
                    **labels_of_every_node,
                    **template["metadata"].get("labels", {}),
                    **{
                        key: r["values"][0]
                        for key, r in requirements.items()
                        if r["operator"] == "In" and len(r["values"]) == 1
                    },
                    INSTANCE_TYPE_LABEL: instance_type,
                    # Karpenter labels every node it launches with its NodePool.
                    "karpenter.sh/nodepool": obj["metadata"]["name"],
                }
                gpus = "karpenter.k8s.aws/instance-gpu-name" in requirements
                shapes.append(NodeShape(obj["metadata"]["name"], labels, taints, gpus))
    return shapes


def _expression_holds(expression: Mapping, labels: Mapping[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    values = expression.get("values", [])
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator == "NotIn":  # a node without the label matches, as the scheduler has it
        return labels.get(key) not in values
    if key not in labels:
        return False
    if operator == "In":
        return labels[key] in values
    if operator in ("Gt", "Lt"):
        value, bound = int(labels[key]), int(values[0])
        return value > bound if operator == "Gt" else value < bound
    raise ValueError(f"unknown node selector operator {operator!r}")


def _tolerates(toleration: Mapping, taint: Mapping) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint["value"]


def fits(pod: Mapping, node: NodeShape) -> bool:
    """Whether the scheduler's filters let the pod spec onto the node."""
    if any(node.labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = (
        (pod.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required and not any(
        all(_expression_holds(e, node.labels) for e in term.get("matchExpressions", []))
        for term in required["nodeSelectorTerms"]
    ):
        return False
    tolerations = pod.get("tolerations") or []
    return all(
        any(_tolerates(t, taint) for t in tolerations)
        for taint in node.taints
        if taint["effect"] in REPELLING
    )


def device_plugins(releases: Iterable[dict], nodes: Iterable[NodeShape]) -> list[DevicePlugin]:
    """The device plugins the platform installs, with the pod spec of each one's DaemonSet."""
    plugins = []
    for release in releases:
        values = release["values"]
        if release["chart"] == NVIDIA_DEVICE_PLUGIN.chart:
            pod = {key: values.get(key) for key in ("nodeSelector", "affinity", "tolerations")}
            plugins.append(DevicePlugin(release["name"], "nvidia.com/gpu", pod))
        elif release["chart"] == EFA_DEVICE_PLUGIN.chart:
            # The chart's DaemonSet: a node affinity term per key of supportedInstanceLabels,
            # its own two tolerations before the release's.
            supported = values["supportedInstanceLabels"]
            terms = [
                {"matchExpressions": [{"key": k, "operator": "In", "values": supported["values"]}]}
                for k in supported["keys"]
            ]
            pod = {
                "nodeSelector": values.get("nodeSelector"),
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": terms
                        }
                    }
                },
                "tolerations": [
                    {"key": "CriticalAddonsOnly", "operator": "Exists"},
                    {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
                    *(values.get("tolerations") or []),
                ],
            }
            plugins.append(DevicePlugin(release["name"], "vpc.amazonaws.com/efa", pod))
    if any(GKE_ACCELERATOR_LABEL in node.labels for node in nodes):
        # GKE runs NVIDIA's device plugin on every node it installs a GPU driver on.
        pod = {
            "nodeSelector": {},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": GKE_ACCELERATOR_LABEL, "operator": "Exists"}
                                ]
                            }
                        ]
                    }
                }
            },
            "tolerations": [{"operator": "Exists"}],
        }
        plugins.append(DevicePlugin("nvidia-gpu-device-plugin (GKE)", "nvidia.com/gpu", pod))
    return plugins


def pod_specs(obj: dict) -> list[tuple[str, dict]]:
    """(field path, pod spec) of each pod template of a workload object."""
    spec = obj.get("spec", {})
    if obj["kind"] not in WORKLOAD_KINDS:
        return []
    if obj["kind"] == "JobSet":
        return [
            (
                f"spec.replicatedJobs[{i}].template.spec.template.spec",
                job["template"]["spec"]["template"]["spec"],
            )
            for i, job in enumerate(spec.get("replicatedJobs", []))
        ]
    return [("spec.template.spec", spec["template"]["spec"])]


def extended_resources(pod: Mapping) -> dict[str, str]:
    """Extended resource -> the field path (under the pod spec) that requests it."""
    found = {}
    for index, container in enumerate(pod.get("containers", [])):
        for kind in ("limits", "requests"):
            for name in (container.get("resources") or {}).get(kind, {}):
                if name not in NODE_RESOURCES and not name.startswith("hugepages-"):
                    found.setdefault(name, f"containers[{index}].resources.{kind}.{name}")
    return found


def unserved_resources(
    workloads: Iterable[dict], nodes: list[NodeShape], plugins: list[DevicePlugin]
) -> list[str]:
    """One line per extended resource a pod requests that no installed device plugin advertises
    on a node the pod fits (or per pod no node pool of the stack fits at all)."""
    problems = []
    for obj in workloads:
        meta = obj.get("metadata", {})
        where = f"{obj['kind']} {meta.get('namespace', '')}/{meta.get('name')}"
        for path, pod in pod_specs(obj):
            requested = extended_resources(pod)
            if not requested:
                continue
            landing = [node for node in nodes if fits(pod, node)]
            if not landing:
                problems.append(f"{where}: {path}: no node pool of the stack fits this pod")
            for resource, field in requested.items():
                unserved = sorted(
                    {
                        f"{node.pool} ({node.labels[INSTANCE_TYPE_LABEL]})"
                        for node in landing
                        if not any(p.resource == resource and fits(p.pod, node) for p in plugins)
                    }
                )
                if unserved:
                    problems.append(
                        f"{where}: {path}.{field}: no device plugin the platform installs "
                        f"advertises {resource} on {', '.join(unserved)}"
                    )
    return problems
