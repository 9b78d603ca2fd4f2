"""Kueue: spot first, then on-demand; a cohort for borrowing between teams; waiting jobs stay alive.

Kueue assigns flavors by quota. A ClusterQueue lists spot before on-demand, so a workload takes spot
quota (its own, or idle spot borrowed from the cohort) and moves to on-demand only when spot would
need preemption. When spot quota is free but the cloud has no spot nodes, the pods stay Pending:
`waitForPodsReady` evicts the workload after `pods_ready_timeout`, and the requeuing strategy puts
it back in line, at its original place and without a retry limit, so it is never deactivated
while spot is dry. The runbook `JobPendingOnSpotTooLong` shows how to send it to on-demand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.config import KueueConfig
from components.k8s.placement import Placement
from components.versions import KUEUE

API_VERSION = "kueue.x-k8s.io/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
SPOT_FLAVOR = "spot"
ON_DEMAND_FLAVOR = "on-demand"
LOCAL_QUEUE = "training"


@dataclass(frozen=True)
class TeamQueue:
    team: str
    namespace: str
    spot_gpus: int
    on_demand_gpus: int
    # Idle spot GPUs of other teams this team may borrow; on-demand is never borrowed (it costs).
    borrow_spot_gpus: int = 0


@dataclass(frozen=True)
class KueueArgs:
    teams: tuple[TeamQueue, ...]
    spot: Placement
    on_demand: Placement
    cpu_per_gpu: int
    memory_gib_per_gpu: int
    gpu_resource: str = "nvidia.com/gpu"
    settings: KueueConfig = field(default_factory=KueueConfig)

    def __post_init__(self) -> None:
        if not self.teams:
            raise ValueError("Kueue needs at least one team")
        for team in self.teams:
            for attr in ("spot_gpus", "on_demand_gpus", "borrow_spot_gpus"):
                if getattr(team, attr) < 0:
                    raise ValueError(f"team {team.team!r}: {attr} must be >= 0")


def kueue_configuration(settings: KueueConfig) -> dict:
    """The Kueue controller Configuration; the chart's defaults plus what spot training needs."""
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        # Per-flavor usage metrics feed the "running on fallback" alert and the dashboard.
        "metrics": {"bindAddress": ":8443", "enableClusterQueueResources": True},
        "webhook": {"port": 9443},
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
    }


def resource_flavor(name: str, placement: Placement) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": dict(placement.node_labels), "tolerations": placement.tolerations()},
    }


def cluster_queue(args: KueueArgs, team: TeamQueue) -> dict:
    def quotas(gpus: int, borrow: int | None) -> list[dict]:
        amounts = {
            "cpu": gpus * args.cpu_per_gpu,
            "memory": f"{gpus * args.memory_gib_per_gpu}Gi",
            args.gpu_resource: gpus,
        }
        per_gpu = {"cpu": args.cpu_per_gpu, "memory": args.memory_gib_per_gpu, args.gpu_resource: 1}
        out = []
        for resource, nominal in amounts.items():
            entry = {"name": resource, "nominalQuota": nominal}
            if borrow is not None:
                limit = borrow * per_gpu[resource]
                entry["borrowingLimit"] = f"{limit}Gi" if resource == "memory" else limit
            out.append(entry)
        return out

    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": team.team, "labels": {"spot-training/team": team.team}},
        "spec": {
            "cohortName": args.settings.cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", args.gpu_resource],
                    # Order is preference: spot first, on-demand as the fallback.
                    "flavors": [
                        {
                            "name": SPOT_FLAVOR,
                            "resources": quotas(team.spot_gpus, team.borrow_spot_gpus),
                        },
                        {"name": ON_DEMAND_FLAVOR, "resources": quotas(team.on_demand_gpus, 0)},
                    ],
                }
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
            depends.append(
                k8s.helm.v3.Release(
                    f"{name}-kueue",
                    name=KUEUE.name,
                    chart=KUEUE.chart,
                    version=KUEUE.version,
                    namespace=KUEUE.namespace,
                    create_namespace=True,
                    atomic=True,
                    values={
                        "enablePrometheus": True,
                        "managerConfig": {
                            "controllerManagerConfigYaml": yaml.safe_dump(
                                kueue_configuration(args.settings), sort_keys=False
                            )
                        },
                    },
                    opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends)),
                )
            )
        child = pulumi.ResourceOptions(parent=self, depends_on=depends)

        def custom(suffix: str, obj: dict, opts: pulumi.ResourceOptions) -> None:
            k8s.apiextensions.CustomResource(
                f"{name}-{suffix}",
                api_version=obj["apiVersion"],
                kind=obj["kind"],
                metadata=obj["metadata"],
                spec=obj["spec"],
                opts=opts,
            )

        custom(
            "cohort",
            {
                "apiVersion": API_VERSION,
                "kind": "Cohort",
                "metadata": {"name": args.settings.cohort},
                "spec": {},
            },
            child,
        )
        custom("flavor-spot", resource_flavor(SPOT_FLAVOR, args.spot), child)
        custom("flavor-on-demand", resource_flavor(ON_DEMAND_FLAVOR, args.on_demand), child)
        for team in args.teams:
            custom(f"cq-{team.team}", cluster_queue(args, team), child)
            custom(f"lq-{team.team}", local_queue(team), child)
        self.local_queue = LOCAL_QUEUE
        self.register_outputs({"localQueue": LOCAL_QUEUE})
