"""The whole Kubernetes layer of a stack, from its typed config and the cloud's `Platform`.

Cloud-neutral: what a cloud adds on the cluster (EKS: Karpenter and its GPU pools) comes as the
platform's add-ons. It comes up in order, each step waiting for what it needs: the monitoring
stack (the CRDs of every monitor and rule), then what schedules GPU nodes and runs on them (the
platform's add-ons, the device plugin and DCGM exporter), the platform services (Kueue, alert
rules, the dashboard), then the teams' namespaces, queues, rendezvous stores and templates. The
layer as a whole waits for the platform to be ready (`Platform.ready`: the cluster, its add-ons,
the stable nodes the releases schedule on, and the identities of what the layer installs).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pulumi
import pulumi_kubernetes as k8s

from components.config import UNBUILT_IMAGE, StackConfig
from components.config.capacity import efa_interfaces, template_class
from components.k8s import rendezvous
from components.k8s.admission import AdmissionArgs, AdmissionPolicies
from components.k8s.alerts import AlertRules, AlertRulesArgs
from components.k8s.dashboard import Dashboard, DashboardArgs
from components.k8s.gpus import GpuAgents, GpuAgentsArgs
from components.k8s.jobs import TrainingJobSpec, class_fields
from components.k8s.kueue import (
    LOCAL_QUEUE,
    ClassQuota,
    KueueArgs,
    KueueClass,
    KueueQueues,
    TeamQueue,
)
from components.k8s.monitoring import NAMESPACE as MONITORING
from components.k8s.monitoring import MonitoringStack, MonitoringStackArgs
from components.k8s.namespaces import TeamNamespace, TeamNamespaceArgs
from components.k8s.placement import STABLE
from components.k8s.prices import price_group
from components.k8s.priorities import Priorities, PrioritiesArgs
from components.k8s.rendezvous import RendezvousStore, RendezvousStoreArgs
from components.k8s.templates import JobTemplates, JobTemplatesArgs
from components.platform import Platform
from components.pools import GPU_TAINT


@dataclass(frozen=True)
class KubernetesLayerArgs:
    settings: StackConfig
    platform: Platform

    def __post_init__(self) -> None:
        roots = self.platform.checkpoint_roots
        missing = [team.name for team in self.settings.teams if team.name not in roots]
        if missing:
            raise ValueError(f"no checkpoint root for teams {missing}")


def training_image(image: str, repository: pulumi.Input[str]) -> pulumi.Input[str]:
    """A full reference as configured, or a bare digest in the platform's image repository."""
    if "@" in image:
        return image
    return pulumi.Output.concat(repository, "@", image)


def secret(value: str | None) -> pulumi.Output[str] | None:
    """A credential from the stack config (`Secret` fields), as a Pulumi secret: the engine keeps
    it encrypted in every resource's inputs, outputs and state."""
    return None if value is None else pulumi.Output.secret(value)


class KubernetesLayer(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: KubernetesLayerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:k8s:KubernetesLayer", name, None, opts)
        config, platform = args.settings, args.platform
        s = config.kubernetes
        child = pulumi.ResourceOptions(parent=self)
        monitoring = MonitoringStack(
            f"{name}-monitoring",
            MonitoringStackArgs(
                receiver=platform.alert_receiver,
                webhook_url=secret(config.alerts.webhook_url),
                node_selector=dict(STABLE.node_labels),
                heartbeat_receiver=platform.heartbeat_receiver,
                storage_class=platform.storage_class,
            ),
            child,
        )
        after_crds = pulumi.ResourceOptions(parent=self, depends_on=[monitoring.release])
        # The provisioner's chart creates a ServiceMonitor; the GPU agents run on the nodes it
        # provisions and the exporter's chart creates a ServiceMonitor too.
        addons = [
            build(f"{name}-{suffix}", after_crds) for suffix, build in platform.addons.items()
        ]
        GpuAgents(
            f"{name}-gpus",
            GpuAgentsArgs(
                device_plugin=platform.needs_device_plugin,
                efa_instance_types=platform.efa_instance_types,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[monitoring.release, *addons]),
        )
        Priorities(f"{name}-priorities", PrioritiesArgs(), child)
        classes = {c.name: c for c in config.gpu_classes}
        borrow = s.kueue.borrow_spot_gpus
        namespaces = []
        for team in config.teams:
            # The namespace quota never stops what Kueue admits: every class's quota and what
            # the team may borrow of it.
            gpus = {
                name: quota.spot_gpus + quota.on_demand_gpus for name, quota in team.quotas.items()
            }
            gpus = {name: gpus.get(name, 0) + borrow for name in classes}
            cpu_milli = sum(n * classes[c].cpu_per_gpu * 1000 for c, n in gpus.items())
            memory_gib = sum(n * classes[c].memory_gib_per_gpu for c, n in gpus.items())
            namespaces.append(
                TeamNamespace(
                    f"{name}-{team.name}",
                    TeamNamespaceArgs(
                        team=team.name,
                        namespace=team.namespace,
                        gpus=sum(gpus.values()),
                        # What Kueue may admit, and the team's rendezvous store.
                        cpu=f"{cpu_milli + rendezvous.CPU_MILLI}m",
                        memory=f"{memory_gib * 1024 + rendezvous.MEMORY_MI}Mi",
                        service_account=team.service_account,
                        gpu_resource=s.gpu_resource,
                        service_account_annotations=platform.service_account_annotations.get(
                            team.name, {}
                        ),
                        monitoring_namespace=MONITORING,
                        metrics_scrapers=platform.metrics_scrapers,
                        role_bindings=dict(platform.team_role_bindings.get(team.name, {})),
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
                        quotas={
                            c: ClassQuota(q.spot_gpus, q.on_demand_gpus)
                            for c, q in team.quotas.items()
                        },
                        borrow_spot_gpus=borrow,
                    )
                    for team in config.teams
                ),
                classes=tuple(
                    KueueClass(c.name, c.cpu_per_gpu, c.memory_gib_per_gpu)
                    for c in config.gpu_classes
                ),
                gpu_resource=s.gpu_resource,
                settings=s.kueue,
                compute_class_label=platform.compute_class_label,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[*namespaces, monitoring.release]),
        )
        t = s.templates
        admission_policies(name, config, platform, after_namespaces)
        if t.image == UNBUILT_IMAGE:
            pulumi.log.warn(
                "kubernetes.templates.image is the placeholder digest of an image not built yet: "
                "the Job templates cannot run, and the rendezvous stores stay at zero replicas, "
                "until you push the training image and set its digest (docs/deploy.md, section 7)"
            )
        image = training_image(t.image, platform.image_repository)
        for index, team in enumerate(config.teams):
            gpu_class = classes[template_class(config, index)]
            store = RendezvousStore(
                f"{name}-{team.name}-rendezvous",
                RendezvousStoreArgs(
                    namespace=team.namespace,
                    image=image,
                    placement=STABLE,
                    labels={"spot-training/team": team.name},
                    replicas=0 if t.image == UNBUILT_IMAGE else 1,
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
                notice_lag_seconds=platform.notice_lag_seconds,
                gpu_resource=s.gpu_resource,
                backoff_limit=t.backoff_limit,
                labels={"spot-training/team": team.name},
                annotations=dict(platform.training_pod_annotations),
                rendezvous_endpoint=store.endpoint,
                # The gang's wait: Kueue's timeouts agree with it (components/config/capacity.py).
                **class_fields(
                    gpu_class,
                    t.gpus_per_node,
                    efa_interfaces(config, gpu_class),
                    platform.compute_class_label,
                ),
            )
            JobTemplates(
                f"{name}-{team.name}-templates",
                JobTemplatesArgs(
                    spec=spec,
                    checkpoint_root=platform.checkpoint_roots[team.name],
                    image=image,
                    min_nodes=t.min_nodes,
                    max_nodes=t.max_nodes,
                    compute_class_label=platform.compute_class_label,
                ),
                after_namespaces,
            )
        AlertRules(
            f"{name}-alerts",
            AlertRulesArgs(
                namespace=MONITORING,
                runbook_base_url=config.alerts.runbook_base_url,
                team_namespaces=tuple(team.namespace for team in config.teams),
                price_group=price_group(s.monitoring, (c.name for c in config.gpu_classes)),
            ),
            after_crds,
        )
        Dashboard(
            f"{name}-dashboard",
            DashboardArgs(
                namespace=MONITORING,
                on_demand_gpu_hour_usd=s.monitoring.on_demand_gpu_hour_usd,
                spot_gpu_hour_usd=s.monitoring.spot_gpu_hour_usd,
            ),
            pulumi.ResourceOptions(parent=self, depends_on=[monitoring.namespace]),
        )
        self.register_outputs({"namespaces": [team.namespace for team in config.teams]})


def admission_policies(
    name: str, config: StackConfig, platform: Platform, opts: pulumi.ResourceOptions
) -> AdmissionPolicies:
    """The team namespaces' admission rules, in the stack's image repositories."""
    image = config.kubernetes.templates.image
    repositories = [platform.image_repository]
    if "@" in image:  # a full reference: its own repository
        repositories.append(image.split("@", 1)[0])
    return AdmissionPolicies(
        f"{name}-admission",
        AdmissionArgs(
            checkpoint_roots={
                team.namespace: platform.checkpoint_roots[team.name] for team in config.teams
            },
            image_repositories=tuple(repositories),
            notice_seconds=platform.notice_seconds,
            notice_sources=platform.notice_sources,
            local_queue=LOCAL_QUEUE,
            guarded_taint_keys=tuple(
                k for k in (GPU_TAINT.key, platform.compute_class_label) if k is not None
            ),
            settings=config.kubernetes.admission,
            today=datetime.now(UTC).date(),
        ),
        opts,
    )


def build_kubernetes(settings: StackConfig, platform: Platform) -> KubernetesLayer:
    """The Kubernetes layer on the platform's cluster, once the platform is ready."""
    provider = k8s.Provider(
        "kubernetes", kubeconfig=platform.kubeconfig, enable_server_side_apply=True
    )
    return KubernetesLayer(
        settings.environment,
        KubernetesLayerArgs(settings=settings, platform=platform),
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=platform.ready),
    )
