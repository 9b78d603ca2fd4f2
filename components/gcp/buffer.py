"""The buffer tier on GKE: on-demand nodes whose count follows a schedule.

GKE has no scheduled pool size, so the pool has no autoscaling and Cloud Scheduler sets its size:
one job per action of the schedule POSTs `{"nodeCount": N}` to the GKE API's `setSize` of the
pool, as a service account of its own whose one permission is the one setSize needs. `pulumi up`
leaves the node count to the schedule. A pool of GPU machines is on-demand capacity of the GPU
class of its accelerator: it carries the class's labels and ComputeClass label and taint, so at
night the class's training pods land on its free nodes.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

from components.catalog import InstanceType, class_name
from components.config.gcp import BufferPoolConfig, ScheduledNodeCount
from components.gcp.iam import check_account_id, check_role_id, custom_role
from components.gcp.nodepools import (
    MANAGEMENT,
    MAX_POOL_NAME,
    UPGRADE,
    class_node_settings,
)
from components.pools import PoolSpec

CONTAINER_API = "https://container.googleapis.com/v1"
# setSize is authorised by container.clusters.update, and nothing narrower exists: GKE's IAM is
# per project, and the predefined roles that hold this permission may also create and delete
# clusters (container.clusterAdmin), or do anything inside them too (container.admin). A custom
# role of this one permission is the least that can resize the pool.
RESIZER_PERMISSIONS = ("container.clusters.update",)
# A resize fails while another operation runs on the cluster (an upgrade, say): retry it.
RETRY = {"retry_count": 5, "min_backoff_duration": "60s", "max_backoff_duration": "600s"}


def buffer_spec(buffer: BufferPoolConfig, machine: InstanceType) -> PoolSpec:
    """The buffer as the cloud-neutral contract sees it: per-zone sizes, from none up to its
    schedule's largest; a GPU buffer is of the class of its accelerator."""
    return PoolSpec(
        tier="buffer",
        instance_types=(machine.name,),
        architecture=machine.architecture,
        gpus=machine.accelerator is not None,
        min_size=0,
        max_size=max(action.nodes_per_zone for action in buffer.schedule),
        desired_size=0,
        disk_size_gib=buffer.disk_size_gb,
        gpu_class=class_name(machine.accelerator) if machine.accelerator else None,
    )


def buffer_pool_name(machine_type: str) -> str:
    return f"buffer-{machine_type}"


def set_size_body(nodes_per_zone: int) -> str:
    """The base64 body of a setSize request (Cloud Scheduler sends the bytes it decodes)."""
    return base64.b64encode(json.dumps({"nodeCount": nodes_per_zone}).encode()).decode()


@dataclass(frozen=True)
class GkeBufferPoolArgs:
    spec: PoolSpec  # sizes are per zone, as GKE counts them
    machine: InstanceType  # the spec's machine type, from the catalog
    schedule: tuple[ScheduledNodeCount, ...]
    project: str
    region: str  # where the Cloud Scheduler jobs live
    cluster: pulumi.Input[str]
    location: pulumi.Input[str]
    zones: list[str]
    node_service_account: pulumi.Input[str]
    scheduler_account_id: str
    resizer_role_id: str
    labels: dict[str, str] = field(default_factory=dict)
    image_streaming: bool = False  # GKE image streaming (class_node_settings)

    def __post_init__(self) -> None:
        spec, machine = self.spec, self.machine
        if spec.tier != "buffer" or spec.instance_types != (machine.name,):
            raise ValueError(
                f"GkeBufferPoolArgs.spec: a buffer of the one machine type {machine.name!r}, got "
                f"tier {spec.tier!r} of {list(spec.instance_types)}"
            )
        if (spec.gpu_class is None) != (machine.gke_accelerator is None):
            raise ValueError(
                "GkeBufferPoolArgs.spec.gpu_class: a GPU buffer joins the class of its "
                f"accelerator, a CPU buffer none ({machine.name!r}, class {spec.gpu_class!r})"
            )
        if not self.zones:
            raise ValueError("GkeBufferPoolArgs.zones: at least one zone")
        if not self.schedule:
            raise ValueError("GkeBufferPoolArgs.schedule: at least one action sizes the pool")
        names = [action.name for action in self.schedule]
        if len(set(names)) != len(names):
            raise ValueError(f"GkeBufferPoolArgs.schedule: action names repeat in {names}")
        if len(buffer_pool_name(machine.name)) > MAX_POOL_NAME:
            raise ValueError(
                f"GkeBufferPoolArgs.machine: pool name {buffer_pool_name(machine.name)!r} is "
                f"longer than GKE's {MAX_POOL_NAME} characters"
            )
        check_account_id(self.scheduler_account_id, "GkeBufferPoolArgs.scheduler_account_id")
        check_role_id(self.resizer_role_id, "GkeBufferPoolArgs.resizer_role_id")


class GkeBufferPool(pulumi.ComponentResource):
    """An on-demand pool without autoscaling, and the Cloud Scheduler jobs that size it."""

    name: pulumi.Output[str]
    set_size_url: pulumi.Output[str]
    scheduler_email: pulumi.Output[str]

    def __init__(
        self, name: str, args: GkeBufferPoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:GkeBufferPool", name, None, opts)
        self.spec = spec = args.spec
        child = pulumi.ResourceOptions(parent=self)
        node_config = class_node_settings(
            args.machine,
            False,
            spec.disk_size_gib,
            spec.gpu_class,
            spec.labels,
            (),
            args.labels,
            args.node_service_account,
            args.image_streaming,
        )
        pool = gcp.container.NodePool(
            f"{name}-nodes",
            name=buffer_pool_name(args.machine.name),
            project=args.project,
            cluster=args.cluster,
            location=args.location,
            node_locations=list(args.zones),
            # Empty until the schedule's next action; no autoscaling, so nothing else sizes it.
            node_count=0,
            management=MANAGEMENT,
            upgrade_settings=UPGRADE,
            node_config=node_config,
            # The schedule owns the size: `pulumi up` must not set it back.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["nodeCount"]),
        )
        account = gcp.serviceaccount.Account(
            f"{name}-scheduler",
            project=args.project,
            account_id=args.scheduler_account_id,
            display_name="Cloud Scheduler: resizes the buffer node pool",
            opts=child,
        )
        role = custom_role(
            f"{name}-resizer",
            args.project,
            args.resizer_role_id,
            "Spot training buffer resizer",
            "Set the size of a GKE node pool (setSize); nothing else it needs.",
            RESIZER_PERMISSIONS,
            child,
        )
        grant = gcp.projects.IAMMember(
            f"{name}-resizer-grant",
            project=args.project,
            role=role.name,
            member=account.member,
            opts=child,
        )
        self.set_size_url = pulumi.Output.concat(
            f"{CONTAINER_API}/projects/{args.project}/locations/",
            args.location,
            "/clusters/",
            args.cluster,
            "/nodePools/",
            pool.name,
            ":setSize",
        )
        for action in args.schedule:
            gcp.cloudscheduler.Job(
                f"{name}-{action.name}",
                name=f"{name}-{action.name}",
                project=args.project,
                region=args.region,
                description=(
                    f"{action.name}: {action.nodes_per_zone} {spec.tier} nodes per zone "
                    f"({action.recurrence}, {action.time_zone})"
                ),
                schedule=action.recurrence,
                time_zone=action.time_zone,
                attempt_deadline="60s",
                retry_config=RETRY,
                http_target={
                    "uri": self.set_size_url,
                    "http_method": "POST",
                    "headers": {"Content-Type": "application/json"},
                    "body": set_size_body(action.nodes_per_zone),
                    # A token minted for the scheduler's account at each run: no key.
                    "oauth_token": {
                        "service_account_email": account.email,
                        "scope": "https://www.googleapis.com/auth/cloud-platform",
                    },
                },
                # The first run must find the account allowed to resize.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[grant]),
            )
        self.name = pool.name
        self.scheduler_email = account.email
        self.register_outputs(
            {
                "name": self.name,
                "set_size_url": self.set_size_url,
                "scheduler_email": self.scheduler_email,
            }
        )
