"""GPUs visible and measured: the NVIDIA device plugin and the DCGM exporter on every GPU node.

Without the device plugin a node advertises no `nvidia.com/gpu` and no training pod fits it;
its chart tolerates only NVIDIA's own taint by default, so here it also tolerates the spot taint.
Both run on the nodes of the GPU classes (label `gpu-class`), spot and on-demand. The DCGM
exporter feeds the GPU-utilisation metrics that the idle alerts and the dashboard read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from components.k8s.objects import Chart, helm_release
from components.pools import GPU_CLASS_LABEL, SPOT_TAINT

NAMESPACE = "kube-system"
DEVICE_PLUGIN = Chart(
    "nvidia-device-plugin",
    "nvidia-device-plugin",
    "0.20.0",
    "https://nvidia.github.io/k8s-device-plugin",
)
DCGM_EXPORTER = Chart(
    "dcgm-exporter",
    "dcgm-exporter",
    "4.1.3",
    "https://nvidia.github.io/dcgm-exporter/helm-charts",
)

# Every GPU node, whatever its class and capacity type.
GPU_NODES = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": GPU_CLASS_LABEL, "operator": "Exists"}]}
            ]
        }
    }
}
GPU_NODE_TOLERATIONS = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {
        "key": SPOT_TAINT.key,
        "operator": "Equal",
        "value": SPOT_TAINT.value,
        "effect": SPOT_TAINT.effect,
    },
]


@dataclass(frozen=True)
class GpuAgentsArgs:
    # Labels the Prometheus operator selects ServiceMonitors by.
    monitor_labels: Mapping[str, str] = field(default_factory=dict)
    device_plugin: bool = True


def device_plugin_values() -> dict:
    """Chart values; every key exists in the chart's values.yaml of DEVICE_PLUGIN's version."""
    # The chart's default affinity waits for node-feature-discovery labels, which these nodes
    # never get (NFD is not installed): select the GPU class label instead.
    return {"affinity": GPU_NODES, "tolerations": GPU_NODE_TOLERATIONS}


def dcgm_exporter_values(args: GpuAgentsArgs) -> dict:
    """Chart values; every key exists in the chart's values.yaml of DCGM_EXPORTER's version."""
    return {
        "affinity": GPU_NODES,
        "tolerations": GPU_NODE_TOLERATIONS,
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        "serviceMonitor": {
            "enabled": True,
            "interval": "30s",
            "additionalLabels": dict(args.monitor_labels),
        },
    }


class GpuAgents(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: GpuAgentsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gpus:GpuAgents", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.device_plugin:
            helm_release(
                f"{name}-device-plugin", DEVICE_PLUGIN, NAMESPACE, device_plugin_values(), child
            )
        helm_release(
            f"{name}-dcgm-exporter", DCGM_EXPORTER, NAMESPACE, dcgm_exporter_values(args), child
        )
        self.register_outputs({})
