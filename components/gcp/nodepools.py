"""GKE node pools, one component per tier: the GKE implementation of the cloud-neutral
`PoolSpec` contract (components/pools.py).

A pool is one machine type over the cluster's zones. Spot pools carry the spot taint explicitly
(GKE labels Spot nodes `cloud.google.com/gke-spot=true` but does not taint Standard pools) and may
set the kubelet's shutdown grace, which GKE accepts on Spot and preemptible pools only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.gcp.config import ShutdownGrace
from components.pools import PoolSpec

# GKE spells the taint effect in its own enum.
GKE_TAINT_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}


def locked_down_node(service_account: pulumi.Input[str]) -> dict:
    """What every node runs with: its own service account (not the Compute Engine default, an
    editor), shielded boot, and the GKE metadata server, so pods see Workload Identity and
    never the node's account."""
    return {
        "service_account": service_account,
        "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        "workload_metadata_config": {"mode": "GKE_METADATA"},
        "shielded_instance_config": {
            "enable_secure_boot": True,
            "enable_integrity_monitoring": True,
        },
        "metadata": {"disable-legacy-endpoints": "true"},
    }


@dataclass(frozen=True)
class GkeNodePoolArgs:
    spec: PoolSpec  # sizes are per zone, as GKE counts them
    project: str
    cluster: pulumi.Input[str]
    location: pulumi.Input[str]
    zones: list[str]
    service_account: pulumi.Input[str]
    shutdown: ShutdownGrace | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = self.spec
        if len(spec.instance_types) != 1:
            raise ValueError(
                "GkeNodePoolArgs.spec.instance_types: a GKE node pool has exactly one machine "
                f"type, got {list(spec.instance_types)}"
            )
        if not self.zones:
            raise ValueError("GkeNodePoolArgs.zones: at least one zone")
        if self.shutdown is not None and spec.capacity != "spot":
            raise ValueError(
                "GkeNodePoolArgs.shutdown: GKE sets the kubelet shutdown grace on Spot pools only"
            )
        if not spec.min_size <= spec.desired_size <= spec.max_size:
            raise ValueError("GkeNodePoolArgs.spec: sizes must satisfy min <= desired <= max")


class GkeNodePool(pulumi.ComponentResource):
    name: pulumi.Output[str]
    instance_group_urls: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: GkeNodePoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:GkeNodePool", name, None, opts)
        self.spec = spec = args.spec
        spot = spec.capacity == "spot"
        node_config = {
            "machine_type": spec.instance_types[0],
            "spot": spot,
            "image_type": "COS_CONTAINERD",
            "boot_disk": {"size_gb": spec.disk_size_gib, "disk_type": "pd-balanced"},
            "labels": spec.labels,
            "taints": [
                {"key": t.key, "value": t.value, "effect": GKE_TAINT_EFFECT[t.effect]}
                for t in spec.taints
            ],
            "resource_labels": args.labels,
            **locked_down_node(args.service_account),
        }
        if args.shutdown is not None:
            node_config["kubelet_config"] = {
                "shutdown_grace_period_seconds": args.shutdown.seconds,
                "shutdown_grace_period_critical_pods_seconds": args.shutdown.critical_pods_seconds,
            }
        pool = gcp.container.NodePool(
            f"{name}-nodes",
            project=args.project,
            cluster=args.cluster,
            location=args.location,
            node_locations=list(args.zones),
            initial_node_count=spec.desired_size,
            autoscaling={
                "min_node_count": spec.min_size,
                "max_node_count": spec.max_size,
                # Spot: take capacity in whichever zone has it; on-demand: spread evenly.
                "location_policy": "ANY" if spot else "BALANCED",
            },
            management={"auto_repair": True, "auto_upgrade": True},
            upgrade_settings={"strategy": "SURGE", "max_surge": 1, "max_unavailable": 0},
            node_config=node_config,
            # The autoscaler owns the size once the pool exists.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initialNodeCount"]),
        )
        self.name = pool.name
        self.instance_group_urls = pool.instance_group_urls
        self.register_outputs({"name": self.name, "instance_group_urls": self.instance_group_urls})
