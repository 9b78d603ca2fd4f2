"""The whole Kubernetes layer of a stack, from its typed config and the cloud's `Platform`.

Cloud-neutral except for the node termination handler, which runs where the cloud sends
interruption events to a queue (AWS). It comes up in order, each step waiting for what it needs:
the monitoring stack (the CRDs of every monitor and rule), then the platform services (Kueue,
alert rules, the dashboard, the termination handler), then the teams' namespaces, queues and
templates. The layer as a whole waits for the platform to be ready (`Platform.ready`: the
cluster, its add-ons and the stable nodes the releases schedule on).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.config import UNBUILT_IMAGE, Alerts, KubernetesConfig, StackConfig, Team
from components.k8s.alerts import AlertRules, AlertRulesArgs
from components.k8s.dashboard import Dashboard, DashboardArgs
from components.k8s.jobs import TrainingJobSpec
from components.k8s.kueue import LOCAL_QUEUE, KueueArgs, KueueQueues, TeamQueue
from components.k8s.monitoring import NAMESPACE as MONITORING
from components.k8s.monitoring import MonitoringStack, MonitoringStackArgs
from components.k8s.namespaces import TeamNamespace, TeamNamespaceArgs
from components.k8s.placement import ON_DEMAND, SPOT
from components.k8s.priorities import Priorities, PrioritiesArgs
from components.k8s.templates import JobTemplates, JobTemplatesArgs
from components.k8s.termination_handler import NodeTerminationHandler, NodeTerminationHandlerArgs
from components.platform import Platform
from components.pools import POOL_LABEL

# Controllers and services run on the stable pool, never on capacity that can be recalled.
ON_STABLE = {POOL_LABEL: "stable"}


@dataclass(frozen=True)
class KubernetesLayerArgs:
    teams: tuple[Team, ...]
    settings: KubernetesConfig
    alerts: Alerts
    platform: Platform

    def __post_init__(self) -> None:
        roots = self.platform.checkpoint_roots
        missing = [team.name for team in self.teams if team.name not in roots]
        if missing:
            raise ValueError(f"no checkpoint root for teams {missing}")


def training_image(image: str, repository: pulumi.Input[str]) -> pulumi.Input[str]:
    """A full reference as configured, or a bare digest in the platform's image repository."""
    if "@" in image:
        return image
    return pulumi.Output.concat(repository, "@", image)


class KubernetesLayer(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: KubernetesLayerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:k8s:KubernetesLayer", name, None, opts)
        s, platform = args.settings, args.platform
        child = pulumi.ResourceOptions(parent=self)
        monitoring = MonitoringStack(
            f"{name}-monitoring",
            MonitoringStackArgs(
                receiver=platform.alert_receiver,
                webhook_url=args.alerts.webhook_url,
                node_selector=ON_STABLE,
            ),
            child,
        )
        after_crds = pulumi.ResourceOptions(parent=self, depends_on=[monitoring.release])
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
                        service_account_annotations=platform.service_account_annotations.get(
                            team.name, {}
                        ),
                        monitoring_namespace=MONITORING,
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
            pulumi.ResourceOptions(parent=self, depends_on=[*namespaces, monitoring.release]),
        )
        t = s.templates
        if t.image == UNBUILT_IMAGE:
            pulumi.log.warn(
                "kubernetes.templates.image is the placeholder digest of an image not built yet: "
                "the Job templates cannot run until you push the training image and set its "
                "digest (docs/deploy.md, section 7)"
            )
        image = training_image(t.image, platform.image_repository)
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
                notice_seconds=platform.notice_seconds,
                notice_sources=platform.notice_sources,
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
                    checkpoint_root=platform.checkpoint_roots[team.name],
                    image=image,
                    min_nodes=t.min_nodes,
                    max_nodes=t.max_nodes,
                ),
                after_namespaces,
            )
        AlertRules(
            f"{name}-alerts",
            AlertRulesArgs(
                namespace=MONITORING,
                runbook_base_url=args.alerts.runbook_base_url,
                team_namespaces=tuple(team.namespace for team in args.teams),
            ),
            after_crds,
        )
        Dashboard(
            f"{name}-dashboard",
            DashboardArgs(
                namespace=MONITORING,
                on_demand_gpu_hour_usd=s.monitoring.on_demand_gpu_hour_usd,
                spot_gpu_hour_usd=s.monitoring.spot_gpu_hour_usd,
                gpu_resource=s.gpu_resource,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[monitoring.namespace]),
        )
        if platform.interruption_queue_url is not None:
            NodeTerminationHandler(
                f"{name}-nth",
                NodeTerminationHandlerArgs(
                    queue_url=platform.interruption_queue_url,
                    region=platform.region,
                    node_grace_seconds=platform.notice_seconds,
                    node_selector=ON_STABLE,
                ),
                after_crds,
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
            teams=tuple(settings.teams),
            settings=settings.kubernetes,
            alerts=settings.alerts,
            platform=platform,
        ),
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=platform.ready),
    )
