"""The whole Kubernetes layer of a stack, from its typed config and the cloud's `Platform`.

Cloud-neutral except for the node termination handler, which runs where the cloud sends
interruption events to a queue (AWS). `build_kubernetes` puts it on the platform's cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.config import KubernetesConfig, StackConfig, Team, duration_seconds
from components.k8s import rendezvous
from components.k8s.alerts import AlertRules, AlertRulesArgs
from components.k8s.dashboard import Dashboard, DashboardArgs
from components.k8s.jobs import TrainingJobSpec
from components.k8s.kueue import LOCAL_QUEUE, KueueArgs, KueueQueues, TeamQueue
from components.k8s.namespaces import TeamNamespace, TeamNamespaceArgs
from components.k8s.placement import ON_DEMAND, SPOT, STABLE
from components.k8s.priorities import Priorities, PrioritiesArgs
from components.k8s.rendezvous import RendezvousStore, RendezvousStoreArgs
from components.k8s.templates import JobTemplates, JobTemplatesArgs
from components.k8s.termination_handler import NodeTerminationHandler, NodeTerminationHandlerArgs
from components.platform import Platform


@dataclass(frozen=True)
class KubernetesLayerArgs:
    teams: tuple[Team, ...]
    settings: KubernetesConfig
    platform: Platform

    def __post_init__(self) -> None:
        roots = self.platform.checkpoint_roots
        missing = [team.name for team in self.teams if team.name not in roots]
        if missing:
            raise ValueError(f"no checkpoint root for teams {missing}")


class KubernetesLayer(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: KubernetesLayerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:k8s:KubernetesLayer", name, None, opts)
        s, platform = args.settings, args.platform
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
                        # What Kueue may admit, and the team's rendezvous store.
                        cpu=f"{gpus * s.cpu_per_gpu * 1000 + rendezvous.CPU_MILLI}m",
                        memory=f"{gpus * s.memory_gib_per_gpu * 1024 + rendezvous.MEMORY_MI}Mi",
                        service_account=team.service_account,
                        gpu_resource=s.gpu_resource,
                        service_account_annotations=platform.service_account_annotations.get(
                            team.name, {}
                        ),
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
        # An agent waits for its gang longer than Kueue waits for the gang's pods, so a run
        # whose lost node never comes back is requeued (uncounted) before an agent gives up.
        kueue_wait_s = max(
            duration_seconds(s.kueue.pods_ready_timeout), duration_seconds(s.kueue.recovery_timeout)
        )
        for team in args.teams:
            store = RendezvousStore(
                f"{name}-{team.name}-rendezvous",
                RendezvousStoreArgs(
                    namespace=team.namespace,
                    image=t.image,
                    placement=STABLE,
                    labels={"spot-training/team": team.name},
                ),
                after_namespaces,
            )
            spec = TrainingJobSpec(
                name=f"{team.name}-example",
                namespace=team.namespace,
                local_queue=LOCAL_QUEUE,
                service_account=team.service_account,
                priority_class=t.priority_class,
                checkpoint_root="",
                image=t.image,
                command=tuple(t.command),
                notice_seconds=platform.notice_seconds,
                notice_sources=platform.notice_sources,
                spot=SPOT,
                gpus=t.gpus_per_node,
                cpu=str(t.gpus_per_node * s.cpu_per_gpu),
                memory=f"{t.gpus_per_node * s.memory_gib_per_gpu}Gi",
                gpu_resource=s.gpu_resource,
                backoff_limit=t.backoff_limit,
                labels={"spot-training/team": team.name},
                rendezvous_endpoint=store.endpoint,
                rendezvous_timeout_s=2 * kueue_wait_s,
            )
            JobTemplates(
                f"{name}-{team.name}-templates",
                JobTemplatesArgs(
                    spec=spec,
                    checkpoint_root=platform.checkpoint_roots[team.name],
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
        if platform.interruption_queue_url is not None:
            NodeTerminationHandler(
                f"{name}-nth",
                NodeTerminationHandlerArgs(
                    queue_url=platform.interruption_queue_url,
                    region=platform.region,
                    node_grace_seconds=platform.notice_seconds,
                    monitor_labels=dict(m.prometheus_selector_labels),
                ),
                child,
            )
        self.register_outputs({"namespaces": [team.namespace for team in args.teams]})


def build_kubernetes(settings: StackConfig, platform: Platform) -> KubernetesLayer:
    """The Kubernetes layer on the platform's cluster, once the platform is ready."""
    provider = k8s.Provider(
        "kubernetes", kubeconfig=platform.kubeconfig, enable_server_side_apply=True
    )
    return KubernetesLayer(
        settings.environment,
        KubernetesLayerArgs(
            teams=tuple(settings.teams), settings=settings.kubernetes, platform=platform
        ),
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=platform.ready),
    )
