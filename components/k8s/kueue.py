"""Kueue on the GPU class model: per class a spot flavor and an on-demand flavor, quotas per class
per team, a cohort for borrowing idle spot, and waiting jobs that stay alive.

A team's ClusterQueue lists, per class, its spot flavor before its on-demand flavor. A job of a
class (its pods select the class's nodes) takes spot quota (its team's, or idle spot borrowed
from the cohort) and on-demand quota only when spot quota would need preemption.

Kueue assigns flavors by quota alone; it cannot tell whether the cloud has spot instances. So
the spot flavor selects the class, not the capacity type: its pods prefer spot nodes and
tolerate them, and when spot is dry the provisioner (Karpenter's spot-then-on-demand order)
starts them on the class's on-demand nodes within seconds. Kueue then still counts them as spot
quota: that is the one place where its accounting and the capacity differ, and the alert
JobRunningOnFallbackTooLong measures it from the nodes' capacity-type label. The on-demand
flavor is pinned to on-demand nodes.

If no capacity at all comes (both pools dry or at their limits), `waitForPodsReady` evicts the
workload after `pods_ready_timeout` and requeues it, at its original place and without a retry
limit, so it is never deactivated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import yaml

from components.config import KueueConfig
from components.k8s.jobs import EFA_RESOURCE
from components.k8s.objects import custom_resource, helm_release
from components.k8s.placement import STABLE, class_placement
from components.pools import CAPACITIES, Capacity
from components.versions import KUEUE

API_VERSION = "kueue.x-k8s.io/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
LOCAL_QUEUE = "training"
# Where the manager serves its admission webhooks. Not the chart's 9443: a private GKE cluster's
# control plane reaches the nodes on 443 and 10250 only, and every Kueue webhook but three fails
# closed, so a webhook it cannot reach refuses every queue and Job. 10250 is the port
# kube-prometheus-stack moves its own webhook to "to work out-of-the-box in GKE private clusters";
# the pod's address is not the node's, so the kubelet's 10250 does not collide.
WEBHOOK_PORT = 10250
# The chart's webhook Service (its values' webhookService.ports) with the target moved along.
WEBHOOK_SERVICE_PORTS = [{"port": 443, "protocol": "TCP", "targetPort": WEBHOOK_PORT}]


def flavor_name(gpu_class: str, capacity: Capacity) -> str:
    return f"{gpu_class}-{capacity}"


@dataclass(frozen=True)
class KueueClass:
    """A GPU class as Kueue counts it: GPUs, with the CPU and memory each GPU comes with."""

    name: str
    cpu_per_gpu: int
    memory_gib_per_gpu: int


@dataclass(frozen=True)
class ClassQuota:
    spot_gpus: int = 0
    on_demand_gpus: int = 0


@dataclass(frozen=True)
class TeamQueue:
    team: str
    namespace: str
    # Nominal quota by class name; classes not listed get none (but may borrow idle spot).
    quotas: dict[str, ClassQuota]
    # Idle spot GPUs of other teams this team may borrow, per class; on-demand is never
    # borrowed (it costs).
    borrow_spot_gpus: int = 0


@dataclass(frozen=True)
class KueueArgs:
    teams: tuple[TeamQueue, ...]
    classes: tuple[KueueClass, ...]
    gpu_resource: str = "nvidia.com/gpu"
    settings: KueueConfig = field(default_factory=KueueConfig)
    # The node label that selects a class's node class, where the cluster has them (GKE).
    compute_class_label: str | None = None

    def __post_init__(self) -> None:
        if not self.teams:
            raise ValueError("Kueue needs at least one team")
        if not self.classes:
            raise ValueError("Kueue needs at least one GPU class")
        names = {c.name for c in self.classes}
        for team in self.teams:
            unknown = sorted(set(team.quotas) - names)
            if unknown:
                raise ValueError(f"team {team.team!r}: quota of unknown classes {unknown}")
            amounts = [team.borrow_spot_gpus] + [
                n for q in team.quotas.values() for n in (q.spot_gpus, q.on_demand_gpus)
            ]
            if any(n < 0 for n in amounts):
                raise ValueError(f"team {team.team!r}: quotas must be >= 0")


def kueue_configuration(settings: KueueConfig) -> dict:
    """The Kueue controller Configuration; the chart's defaults plus what spot training needs."""
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        # Per-flavor usage metrics feed the "running on fallback" alert and the dashboard.
        "metrics": {"bindAddress": ":8443", "enableClusterQueueResources": True},
        "webhook": {"port": WEBHOOK_PORT},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "manageJobsWithoutQueueName": False,
        "waitForPodsReady": {
            "timeout": settings.pods_ready_timeout,
            "recoveryTimeout": settings.recovery_timeout,
            "blockAdmission": False,
            "requeuingStrategy": {
                # Creation: a requeued run keeps its place in line instead of going to the back.
                "timestamp": "Creation",
                # No backoffLimitCount: requeue forever; a dry spot market never deactivates a job.
                "backoffBaseSeconds": settings.backoff_base_seconds,
                "backoffMaxSeconds": settings.backoff_max_seconds,
            },
        },
        "integrations": {"frameworks": ["batch/job"]},
        # A multi-node pod requests its node's EFA interfaces; they are not quota, and a
        # resource no ClusterQueue covers would leave the workload inadmissible.
        "resources": {"excludeResourcePrefixes": [EFA_RESOURCE]},
    }


def resource_flavor(
    gpu_class: str, capacity: Capacity, compute_class_label: str | None = None
) -> dict:
    placement = class_placement(gpu_class, capacity, compute_class_label)
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor_name(gpu_class, capacity)},
        "spec": {"nodeLabels": dict(placement.node_labels), "tolerations": placement.tolerations()},
    }


def cluster_queue(args: KueueArgs, team: TeamQueue) -> dict:
    def quotas(gpu_class: KueueClass, gpus: int, borrow: int) -> list[dict]:
        per_gpu = {
            "cpu": gpu_class.cpu_per_gpu,
            "memory": gpu_class.memory_gib_per_gpu,
            args.gpu_resource: 1,
        }

        def amount(resource: str, n: int) -> int | str:
            return f"{n * per_gpu[resource]}Gi" if resource == "memory" else n * per_gpu[resource]

        return [
            {
                "name": resource,
                "nominalQuota": amount(resource, gpus),
                "borrowingLimit": amount(resource, borrow),
            }
            for resource in per_gpu
        ]

    flavors = []
    for gpu_class in args.classes:
        quota = team.quotas.get(gpu_class.name, ClassQuota())
        # Order is preference: the class's spot first, its on-demand as the fallback.
        flavors += [
            {
                "name": flavor_name(gpu_class.name, "spot"),
                "resources": quotas(gpu_class, quota.spot_gpus, team.borrow_spot_gpus),
            },
            {
                "name": flavor_name(gpu_class.name, "on-demand"),
                "resources": quotas(gpu_class, quota.on_demand_gpus, 0),
            },
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": team.team, "labels": {"spot-training/team": team.team}},
        "spec": {
            "cohortName": args.settings.cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            # One group: a job takes CPU, memory and GPUs of one flavor, the one of its class.
            "resourceGroups": [
                {"coveredResources": ["cpu", "memory", args.gpu_resource], "flavors": flavors}
            ],
            "flavorFungibility": {
                # Borrowing idle spot is cheaper than paying for on-demand: stop at spot.
                "whenCanBorrow": "MayStopSearch",
                # Preempting a peer to stay on spot is worse than falling back: try on-demand.
                "whenCanPreempt": "TryNextFlavor",
            },
            "preemption": {
                # A team always gets its nominal quota back from borrowers.
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "Never"},
                # training-standard may displace training-preemptible of the same team.
                "withinClusterQueue": "LowerPriority",
            },
        },
    }


def local_queue(team: TeamQueue) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": team.namespace},
        "spec": {"clusterQueue": team.team},
    }


class KueueQueues(pulumi.ComponentResource):
    """Kueue itself (optional), its flavors, the teams' cohort, ClusterQueues and LocalQueues."""

    def __init__(
        self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:kueue:KueueQueues", name, None, opts)
        # Children wait for what the component waits for: the namespaces the LocalQueues live
        # in, and the monitoring stack whose ServiceMonitor CRD Kueue's chart uses.
        depends: list[pulumi.Resource] = list(opts.depends_on or []) if opts else []
        if args.settings.install:
            values = {
                "enablePrometheus": True,
                "webhookService": {"ports": WEBHOOK_SERVICE_PORTS},
                "controllerManager": {"nodeSelector": dict(STABLE.node_labels)},
                "managerConfig": {
                    "controllerManagerConfigYaml": yaml.safe_dump(
                        kueue_configuration(args.settings), sort_keys=False
                    )
                },
            }
            depends.append(
                helm_release(
                    f"{name}-kueue",
                    KUEUE,
                    values,
                    pulumi.ResourceOptions(parent=self, depends_on=list(depends)),
                    create_namespace=True,
                )
            )
        child = pulumi.ResourceOptions(parent=self, depends_on=depends)
        cohort = {
            "apiVersion": API_VERSION,
            "kind": "Cohort",
            "metadata": {"name": args.settings.cohort},
            "spec": {},
        }
        custom_resource(f"{name}-cohort", cohort, child)
        for gpu_class in args.classes:
            for capacity in CAPACITIES:
                flavor = resource_flavor(gpu_class.name, capacity, args.compute_class_label)
                custom_resource(f"{name}-flavor-{flavor['metadata']['name']}", flavor, child)
        for team in args.teams:
            custom_resource(f"{name}-cq-{team.team}", cluster_queue(args, team), child)
            custom_resource(f"{name}-lq-{team.team}", local_queue(team), child)
        self.local_queue = LOCAL_QUEUE
        self.register_outputs({"localQueue": LOCAL_QUEUE})
