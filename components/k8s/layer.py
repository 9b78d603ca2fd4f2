"""The whole Kubernetes layer of a stack, from its typed config, on one cluster's provider.

Cloud-neutral except for the node termination handler, which runs where the cloud sends
interruption events to a queue (AWS). Pass the cluster's Kubernetes provider in `opts.providers`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.config import KubernetesConfig, Team
from components.k8s.alerts import AlertRules, AlertRulesArgs
from components.k8s.dashboard import Dashboard, DashboardArgs
from components.k8s.jobs import TrainingJobSpec
from components.k8s.kueue import LOCAL_QUEUE, KueueArgs, KueueQueues, TeamQueue
from components.k8s.namespaces import TeamNamespace, TeamNamespaceArgs
from components.k8s.placement import ON_DEMAND, SPOT
from components.k8s.priorities import Priorities, PrioritiesArgs
from components.k8s.templates import JobTemplates, JobTemplatesArgs
from components.k8s.termination_handler import NodeTerminationHandler, NodeTerminationHandlerArgs


@dataclass(frozen=True)
class KubernetesLayerArgs:
    teams: tuple[Team, ...]
    settings: KubernetesConfig
    # Where each team's runs checkpoint, e.g. "s3://<bucket>/<team prefix>", by team name.
    checkpoint_roots: dict[str, pulumi.Input[str]]
    notice_seconds: int
    notice_sources: tuple[str, ...]
    # AWS: the interruption queue the node termination handler drains nodes from.
    interruption_queue_url: pulumi.Input[str] | None = None
    region: str = ""

    def __post_init__(self) -> None:
        missing = [team.name for team in self.teams if team.name not in self.checkpoint_roots]
        if missing:
            raise ValueError(f"no checkpoint root for teams {missing}")


class KubernetesLayer(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: KubernetesLayerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:k8s:KubernetesLayer", name, None, opts)
        s = args.settings
        child = pulumi.ResourceOptions(parent=self)
        Priorities(f"{name}-priorities", PrioritiesArgs(), child)
        namespaces = []
        for team in args.teams:
            gpus = team.spot_gpus + team.on_demand_gpus + s.kueue.borrow_spot_gpus
            namespaces.append(
                TeamNamespace(
                    f"{name}-{team.name}",
                    TeamNamespaceArgs(
                        team=team.name,
                        namespace=team.namespace,
                        gpus=gpus,
                        cpu=str(gpus * s.cpu_per_gpu),
                        memory=f"{gpus * s.memory_gib_per_gpu}Gi",
                        service_account=team.service_account,
                        gpu_resource=s.gpu_resource,
                        monitoring_namespace=s.monitoring.namespace,
                    ),
                    child,
                )
            )
        after_namespaces = pulumi.ResourceOptions(parent=self, depends_on=namespaces)
        KueueQueues(
            f"{name}-kueue",
            KueueArgs(
                teams=tuple(
                    TeamQueue(
                        team=team.name,
                        namespace=team.namespace,
                        spot_gpus=team.spot_gpus,
                        on_demand_gpus=team.on_demand_gpus,
                        borrow_spot_gpus=s.kueue.borrow_spot_gpus,
                    )
                    for team in args.teams
                ),
                spot=SPOT,
                on_demand=ON_DEMAND,
                cpu_per_gpu=s.cpu_per_gpu,
                memory_gib_per_gpu=s.memory_gib_per_gpu,
                gpu_resource=s.gpu_resource,
                settings=s.kueue,
            ),
            after_namespaces,
        )
        t = s.templates
        for team in args.teams:
            spec = TrainingJobSpec(
                name=f"{team.name}-example",
                namespace=team.namespace,
                local_queue=LOCAL_QUEUE,
                service_account=team.service_account,
                priority_class=t.priority_class,
                checkpoint_root="",
                image=t.image,
                command=tuple(t.command),
                notice_seconds=args.notice_seconds,
                notice_sources=args.notice_sources,
                spot=SPOT,
                gpus=t.gpus_per_node,
                cpu=str(t.gpus_per_node * s.cpu_per_gpu),
                memory=f"{t.gpus_per_node * s.memory_gib_per_gpu}Gi",
                gpu_resource=s.gpu_resource,
                backoff_limit=t.backoff_limit,
                labels={"spot-training/team": team.name},
            )
            JobTemplates(
                f"{name}-{team.name}-templates",
                JobTemplatesArgs(
                    spec=spec,
                    checkpoint_root=args.checkpoint_roots[team.name],
                    min_nodes=t.min_nodes,
                    max_nodes=t.max_nodes,
                ),
                after_namespaces,
            )
        m = s.monitoring
        AlertRules(
            f"{name}-alerts",
            AlertRulesArgs(
                namespace=m.namespace,
                runbook_base_url=m.runbook_base_url,
                team_namespaces=tuple(team.namespace for team in args.teams),
                selector_labels=dict(m.prometheus_selector_labels),
            ),
            child,
        )
        Dashboard(
            f"{name}-dashboard",
            DashboardArgs(
                namespace=m.namespace,
                on_demand_gpu_hour_usd=m.on_demand_gpu_hour_usd,
                spot_gpu_hour_usd=m.spot_gpu_hour_usd,
                gpu_resource=s.gpu_resource,
            ),
            child,
        )
        if args.interruption_queue_url is not None:
            NodeTerminationHandler(
                f"{name}-nth",
                NodeTerminationHandlerArgs(
                    queue_url=args.interruption_queue_url,
                    region=args.region,
                    node_grace_seconds=args.notice_seconds,
                    monitor_labels=dict(m.prometheus_selector_labels),
                ),
                child,
            )
        self.register_outputs({"namespaces": [team.namespace for team in args.teams]})
