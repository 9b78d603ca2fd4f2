"""GKE node pools: the GKE implementation of the cloud-neutral capacity contract
(components/pools.py).

- `GkeNodePool`: a fixed tier (`PoolSpec`, the stable pool): one machine type over the cluster's
  zones, sized per zone.
- `GkeClassPool`: one machine type of a GPU class's spot or on-demand capacity (`ClassPool`),
  over the zones of the class that offer its accelerator, scaled by the cluster autoscaler from
  zero to the class's GPU limit, in whichever zone has capacity (location policy ANY). Its GPUs
  come with the machine; GKE installs their driver (and runs the device plugin itself). Spot pools
  carry the spot taint explicitly (GKE labels Spot nodes `cloud.google.com/gke-spot=true` but does
  not taint Standard pools) and the kubelet's shutdown grace, which GKE accepts on Spot pools only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.catalog import InstanceType
from components.config.gcp import ShutdownGrace
from components.gcp.computeclass import COMPUTE_CLASS_LABEL
from components.pools import ClassPool, PoolSpec, Taint
from components.versions import GKE_GPU_DRIVER_VERSION

# GKE node pool names: at most 40 characters.
MAX_POOL_NAME = 40

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


def node_settings(
    machine_type: str,
    spot: bool,
    disk_size_gib: int,
    node_labels: dict[str, str],
    taints: tuple[Taint, ...],
    resource_labels: dict[str, str],
    service_account: pulumi.Input[str],
) -> dict:
    """A pool's `node_config`: its machine, its Kubernetes labels and taints, locked down."""
    return {
        "machine_type": machine_type,
        "spot": spot,
        "image_type": "COS_CONTAINERD",
        "boot_disk": {"size_gb": disk_size_gib, "disk_type": "pd-balanced"},
        "labels": node_labels,
        "taints": [
            {"key": t.key, "value": t.value, "effect": GKE_TAINT_EFFECT[t.effect]} for t in taints
        ],
        "resource_labels": resource_labels,
        **locked_down_node(service_account),
    }


def class_node_settings(
    machine: InstanceType,
    spot: bool,
    disk_size_gib: int,
    gpu_class: str | None,
    node_labels: dict[str, str],
    taints: tuple[Taint, ...],
    resource_labels: dict[str, str],
    service_account: pulumi.Input[str],
    image_streaming: bool = False,
) -> dict:
    """The `node_config` of a pool that may be GPU class capacity. With a class, it carries the
    label and taint of the class's ComputeClass (which uses only such pools), and names its
    GPUs; with image streaming, its images from Artifact Registry start before they are pulled
    (GKE requires COS_CONTAINERD nodes for it, which node_settings always sets)."""
    if gpu_class is None:
        return node_settings(
            machine.name, spot, disk_size_gib, node_labels, taints, resource_labels, service_account
        )
    compute_class = Taint(COMPUTE_CLASS_LABEL, gpu_class, "NoSchedule")
    node_config = node_settings(
        machine.name,
        spot,
        disk_size_gib,
        {**node_labels, COMPUTE_CLASS_LABEL: gpu_class},
        (*taints, compute_class),
        resource_labels,
        service_account,
    )
    # The GPUs come with the machine type; naming them lets GKE install their driver.
    node_config["guest_accelerators"] = [
        {
            "type": machine.gke_accelerator,
            "count": machine.gpus,
            "gpu_driver_installation_config": {"gpu_driver_version": GKE_GPU_DRIVER_VERSION},
        }
    ]
    if image_streaming:
        node_config["gcfs_config"] = {"enabled": True}
    return node_config


MANAGEMENT = {"auto_repair": True, "auto_upgrade": True}
UPGRADE = {"strategy": "SURGE", "max_surge": 1, "max_unavailable": 0}


@dataclass(frozen=True)
class GkeNodePoolArgs:
    spec: PoolSpec  # sizes are per zone, as GKE counts them
    project: str
    cluster: pulumi.Input[str]
    location: pulumi.Input[str]
    zones: list[str]
    service_account: pulumi.Input[str]
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
        if not spec.min_size <= spec.desired_size <= spec.max_size:
            raise ValueError("GkeNodePoolArgs.spec: sizes must satisfy min <= desired <= max")


class GkeNodePool(pulumi.ComponentResource):
    """A fixed on-demand pool, spread evenly over the zones."""

    name: pulumi.Output[str]
    instance_group_urls: pulumi.Output[list[str]]

    def __init__(
        self, name: str, args: GkeNodePoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:GkeNodePool", name, None, opts)
        self.spec = spec = args.spec
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
                "location_policy": "BALANCED",
            },
            management=MANAGEMENT,
            upgrade_settings=UPGRADE,
            node_config=node_settings(
                spec.instance_types[0],
                False,
                spec.disk_size_gib,
                spec.labels,
                (),
                args.labels,
                args.service_account,
            ),
            # The autoscaler owns the size once the pool exists.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initialNodeCount"]),
        )
        self.name = pool.name
        self.instance_group_urls = pool.instance_group_urls
        self.register_outputs({"name": self.name, "instance_group_urls": self.instance_group_urls})


def class_pool_name(pool: ClassPool, machine_type: str) -> str:
    """The GKE name of one machine type's pool of a class's capacity, e.g.
    "l4-24gb-spot-g2-standard-8"."""
    return f"{pool.name}-{machine_type}"


@dataclass(frozen=True)
class GkeClassPoolArgs:
    pool: ClassPool
    machine: InstanceType  # one of the pool's types, from the catalog
    project: str
    cluster: pulumi.Input[str]
    location: pulumi.Input[str]
    service_account: pulumi.Input[str]
    # The kubelet's graceful shutdown on Spot nodes; None on on-demand pools.
    shutdown: ShutdownGrace | None = None
    labels: dict[str, str] = field(default_factory=dict)
    image_streaming: bool = False  # GKE image streaming (class_node_settings)

    def __post_init__(self) -> None:
        pool, machine = self.pool, self.machine
        if machine.name not in pool.instance_types:
            raise ValueError(
                f"GkeClassPoolArgs.machine: {machine.name!r} is not a type of class "
                f"{pool.gpu_class!r} ({', '.join(pool.instance_types)})"
            )
        if machine.gke_accelerator is None:
            raise ValueError(f"GkeClassPoolArgs.machine: {machine.name!r} has no GKE accelerator")
        if (self.shutdown is not None) != (pool.capacity == "spot"):
            raise ValueError(
                "GkeClassPoolArgs.shutdown: GKE sets the kubelet shutdown grace on Spot pools, "
                "and a Spot pool needs it (the notice budget follows it)"
            )
        if pool.max_gpus < machine.gpus:
            raise ValueError(
                f"GkeClassPoolArgs.pool.max_gpus: {pool.max_gpus} GPUs cannot hold one "
                f"{machine.name} ({machine.gpus} GPUs)"
            )
        if len(class_pool_name(pool, machine.name)) > MAX_POOL_NAME:
            raise ValueError(
                f"GkeClassPoolArgs: pool name {class_pool_name(pool, machine.name)!r} is longer "
                f"than GKE's {MAX_POOL_NAME} characters; shorten the class name"
            )

    @property
    def max_nodes(self) -> int:
        """Nodes of this machine type that stay within the class's GPU limit."""
        return math.floor(self.pool.max_gpus / self.machine.gpus)


class GkeClassPool(pulumi.ComponentResource):
    """One machine type of a GPU class's spot or on-demand capacity, from zero nodes."""

    name: pulumi.Output[str]

    def __init__(
        self, name: str, args: GkeClassPoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:GkeClassPool", name, None, opts)
        pool, machine = args.pool, args.machine
        node_config = class_node_settings(
            machine,
            pool.capacity == "spot",
            pool.disk_size_gib,
            pool.gpu_class,
            pool.labels,
            pool.taints,
            args.labels,
            args.service_account,
            args.image_streaming,
        )
        # Only where it differs from GKE's default: a cluster before EXTENDED_GRACE_VERSION
        # refuses the setting altogether.
        if args.shutdown is not None and not args.shutdown.is_gke_default:
            node_config["kubelet_config"] = {
                "shutdown_grace_period_seconds": args.shutdown.seconds,
                "shutdown_grace_period_critical_pods_seconds": args.shutdown.critical_pods_seconds,
            }
        node_pool = gcp.container.NodePool(
            f"{name}-nodes",
            name=class_pool_name(pool, machine.name),
            project=args.project,
            cluster=args.cluster,
            location=args.location,
            node_locations=list(pool.zones),
            initial_node_count=0,
            autoscaling={
                # Totals over the zones: the class's GPU limit, wherever capacity is.
                "total_min_node_count": 0,
                "total_max_node_count": args.max_nodes,
                "location_policy": "ANY",
            },
            management=MANAGEMENT,
            upgrade_settings=UPGRADE,
            node_config=node_config,
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initialNodeCount"]),
        )
        self.name = node_pool.name
        self.register_outputs({"name": self.name})
