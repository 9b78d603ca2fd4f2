"""GPUs visible: the NVIDIA device plugin on every GPU node.

Without the device plugin a node advertises no `nvidia.com/gpu` and no training pod fits it;
its chart tolerates only NVIDIA's own taint by default, so here it also tolerates the spot taint.
It runs on the nodes of the GPU classes (label `gpu-class`), spot and on-demand. GPU utilisation
comes from the cloud's own DCGM exporter (components/platform.py), one per node.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.k8s.objects import helm_release
from components.pools import GPU_CLASS_LABEL, SPOT_TAINT
from components.versions import NVIDIA_DEVICE_PLUGIN

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
    device_plugin: bool = True


def device_plugin_values() -> dict:
    """Chart values; every key exists in the chart's values.yaml of NVIDIA_DEVICE_PLUGIN's
    version."""
    # The chart's default affinity waits for node-feature-discovery labels, which these nodes
    # never get (NFD is not installed): select the GPU class label instead.
    return {"affinity": GPU_NODES, "tolerations": GPU_NODE_TOLERATIONS}


class GpuAgents(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: GpuAgentsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gpus:GpuAgents", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if args.device_plugin:
            helm_release(
                f"{name}-device-plugin", NVIDIA_DEVICE_PLUGIN, device_plugin_values(), child
            )
        self.register_outputs({})
