"""GPUs visible: the NVIDIA device plugin on every GPU node, and the EFA device plugin where the
nodes have EFA.

Without the device plugin a node advertises no `nvidia.com/gpu` and no training pod fits it;
its chart tolerates only NVIDIA's own taint by default, so here it also tolerates the spot taint.
It runs on the nodes of the GPU classes (label `gpu-class`), spot and on-demand. GPU utilisation
comes from the cloud's own DCGM exporter (components/platform.py), one per node.

Likewise a multi-node pod that requests `vpc.amazonaws.com/efa` stays Pending unless the EFA
device plugin runs on its node. Its chart schedules on the instance types it lists; here it
lists the platform's EFA types and tolerates the GPU nodes' taints.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.k8s.objects import helm_release
from components.pools import GPU_CLASS_LABEL, SPOT_TAINT
from components.versions import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

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
    # Where the EFA device plugin runs; none: it is not installed.
    efa_instance_types: tuple[str, ...] = ()


def device_plugin_values() -> dict:
    """Chart values; every key exists in the chart's values.yaml of NVIDIA_DEVICE_PLUGIN's
    version."""
    # The chart's default affinity waits for node-feature-discovery labels, which these nodes
    # never get (NFD is not installed): select the GPU class label instead.
    return {"affinity": GPU_NODES, "tolerations": GPU_NODE_TOLERATIONS}


def efa_device_plugin_values(instance_types: tuple[str, ...]) -> dict:
    """Chart values; every key exists in the chart's values.yaml of EFA_DEVICE_PLUGIN's version.
    The chart's DaemonSet requires a node label of `supportedInstanceLabels.keys` to be one of its
    values, and tolerates `CriticalAddonsOnly` and `aws.amazon.com/efa` itself."""
    return {
        "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": list(instance_types)},
        "tolerations": GPU_NODE_TOLERATIONS,
    }


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
        if args.efa_instance_types:
            helm_release(
                f"{name}-efa-device-plugin",
                EFA_DEVICE_PLUGIN,
                efa_device_plugin_values(args.efa_instance_types),
                child,
            )
        self.register_outputs({})
