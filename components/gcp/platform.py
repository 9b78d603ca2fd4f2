"""The GCP half of the platform: everything the cloud provides, handed on as one `Platform`.

Per GPU class, a spot and an on-demand node pool per machine type over the class's zones
(components/gcp/nodepools.py); the stable pool for the controllers; optionally the buffer pool
sized by a schedule (components/gcp/buffer.py); the checkpoint bucket, the teams' Workload
Identity, the image repository, quotas and alerting.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from components.catalog import catalog
from components.config import NOTICE_SOURCES, StackConfig
from components.config.gcp import rbac_subject
from components.gcp.buffer import (
    GkeBufferPool,
    GkeBufferPoolArgs,
    buffer_pool_name,
    buffer_spec,
)
from components.gcp.cluster import Cluster, ClusterArgs
from components.gcp.computeclass import (
    COMPUTE_CLASS_LABEL,
    ClassOrder,
    ComputeClasses,
    ComputeClassesArgs,
)
from components.gcp.iam import (
    BUFFER_OPERATOR_PERMISSIONS,
    OPERATOR_PERMISSIONS,
    CheckpointWriterRole,
    CheckpointWriterRoleArgs,
    NodeServiceAccount,
    NodeServiceAccountArgs,
    PlatformGroups,
    PlatformGroupsArgs,
    TeamTrainingIdentity,
    TeamTrainingIdentityArgs,
    account_id,
    role_id,
)
from components.gcp.managed_prometheus import (
    COLLECTOR_PEER,
    TrainingPodMonitoring,
    TrainingPodMonitoringArgs,
)
from components.gcp.nodepools import (
    GkeClassPool,
    GkeClassPoolArgs,
    GkeNodePool,
    GkeNodePoolArgs,
    class_pool_name,
)
from components.gcp.observability import Observability, ObservabilityArgs
from components.gcp.quotas import SpotGpuQuotas, SpotGpuQuotasArgs, all_regions_needs
from components.gcp.registry import ImageRepository, ImageRepositoryArgs
from components.gcp.services import (
    IMAGE_STREAMING_API,
    PLATFORM_APIS,
    SCHEDULER_API,
    ProjectServices,
    ProjectServicesArgs,
)
from components.gcp.storage import CheckpointBucket, CheckpointBucketArgs
from components.platform import Platform
from components.pools import PoolSpec, class_pools
from components.tags import cost_tags

# The annotation that lets a Kubernetes service account act as a Google service account.
WORKLOAD_IDENTITY_ANNOTATION = "iam.gke.io/gcp-service-account"
# The cluster autoscaler's "never evict this pod to scale its node down".
SAFE_TO_EVICT_FALSE = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def build_gcp(settings: StackConfig) -> Platform:
    """Network, cluster, stable pool, checkpoint bucket, identities, quotas and alerting of a GCP
    stack; the Kubernetes layer gets them as one `Platform`."""
    gcp_config, env, project = settings.gcp, settings.environment, settings.gcp.project
    labels = cost_tags(settings.cost_tags, env)
    # Calls bill to the project itself, not to the caller's ADC quota project (Cloud Quotas
    # refuses user credentials without one).
    provider = gcp.Provider(
        "gcp",
        project=project,
        region=settings.region,
        default_labels=labels,
        billing_project=project,
        user_project_override=True,
    )
    services = ProjectServices(
        f"{env}-apis",
        ProjectServicesArgs(
            project=project,
            services=(
                *PLATFORM_APIS,
                *([SCHEDULER_API] if gcp_config.buffer_pool else []),
                *([IMAGE_STREAMING_API] if gcp_config.image_streaming else []),
            ),
        ),
        opts=pulumi.ResourceOptions(providers=[provider]),
    )
    opts = pulumi.ResourceOptions(providers=[provider], depends_on=[services])

    nodes = NodeServiceAccount(
        f"{env}-nodes",
        NodeServiceAccountArgs(
            project=project,
            account_id=account_id(env, "gke-nodes"),
            image_streaming=gcp_config.image_streaming,
        ),
        opts=opts,
    )
    cluster = Cluster(
        env,
        ClusterArgs(
            project=project,
            region=settings.region,
            zones=settings.zones,
            node_service_account=nodes.email,
            create=gcp_config.cluster.create,
            existing=gcp_config.cluster.existing,
            labels=labels,
            rbac_groups=bool(gcp_config.groups.rbac_groups),
        ),
        opts=opts,
    )
    stable = gcp_config.stable_pool
    machines = catalog("gcp").instance_types
    stable_pool = GkeNodePool(
        f"{env}-stable",
        GkeNodePoolArgs(
            spec=PoolSpec(
                tier="stable",
                instance_types=(stable.machine_type,),
                architecture=machines[stable.machine_type].architecture,
                gpus=False,
                min_size=stable.min_nodes_per_zone,
                max_size=stable.max_nodes_per_zone,
                desired_size=stable.min_nodes_per_zone,
                disk_size_gib=stable.disk_size_gb,
            ),
            project=project,
            cluster=cluster.name,
            location=cluster.location,
            zones=settings.zones,
            service_account=nodes.email,
            labels=cost_tags(settings.cost_tags, env, capacity="on-demand"),
        ),
        opts=opts,
    )
    gpu_pools = {
        (pool, machine): GkeClassPool(
            f"{env}-{pool.name}-{machine}",
            GkeClassPoolArgs(
                pool=pool,
                machine=machines[machine],
                project=project,
                cluster=cluster.name,
                location=cluster.location,
                service_account=nodes.email,
                shutdown=gcp_config.spot_shutdown if pool.capacity == "spot" else None,
                labels=cost_tags(settings.cost_tags, env, capacity=pool.capacity),
                image_streaming=gcp_config.image_streaming,
            ),
            opts=opts,
        )
        for pool in class_pools(settings)
        for machine in pool.instance_types
        if pool.max_gpus >= machines[machine].gpus
    }
    buffer = gcp_config.buffer_pool
    buffer_pool = None
    if buffer is not None:
        machine = machines[buffer.machine_type]
        buffer_pool = GkeBufferPool(
            f"{env}-buffer",
            GkeBufferPoolArgs(
                spec=buffer_spec(buffer, machine),
                machine=machine,
                schedule=tuple(buffer.schedule),
                project=project,
                region=settings.region,
                cluster=cluster.name,
                location=cluster.location,
                zones=buffer.pool_zones(settings.zones),
                node_service_account=nodes.email,
                scheduler_account_id=account_id(env, "buffer-scheduler"),
                resizer_role_id=role_id("BufferResizer", env),
                labels=cost_tags(settings.cost_tags, env, capacity="on-demand"),
                image_streaming=gcp_config.image_streaming,
            ),
            opts=opts,
        )
    repository = ImageRepository(
        f"{env}-images",
        ImageRepositoryArgs(
            project=project,
            location=settings.region,
            repository_id=f"{env}-training",
            labels=labels,
        ),
        opts=opts,
    )
    storage = gcp_config.checkpoint_storage
    bucket = CheckpointBucket(
        f"{env}-checkpoints",
        CheckpointBucketArgs(
            project=project,
            location=settings.region,
            noncurrent_version_days=storage.noncurrent_version_days,
            noncurrent_versions_to_keep=storage.noncurrent_versions_to_keep,
            abort_multipart_days=storage.abort_multipart_days,
            soft_delete_days=storage.soft_delete_days,
            key_rotation_days=storage.key_rotation_days,
            bucket_name=storage.bucket_name,
            labels=labels,
        ),
        opts=opts,
    )
    writer = CheckpointWriterRole(
        f"{env}-checkpoint-writer",
        CheckpointWriterRoleArgs(project=project, role_id=role_id("Checkpoints", env)),
        opts=opts,
    )
    identities = {
        team.name: TeamTrainingIdentity(
            f"{env}-{team.name}-training",
            TeamTrainingIdentityArgs(
                project=project,
                account_id=account_id(env, team.name, "training"),
                workload_pool=cluster.workload_pool,
                namespace=team.namespace,
                service_account=team.service_account,
                bucket=bucket.bucket,
                prefix=team.checkpoint_prefix,
                role=writer.id,
            ),
            opts=opts,
        )
        for team in settings.teams
    }
    groups = gcp_config.groups
    PlatformGroups(
        f"{env}-groups",
        PlatformGroupsArgs(
            project=project,
            bucket=bucket.bucket,
            platform_admin=groups.platform_admin,
            operator_role_id=role_id("Operator", env),
            operator_permissions=(
                *OPERATOR_PERMISSIONS,
                *(BUFFER_OPERATOR_PERMISSIONS if buffer is not None else ()),
            ),
            # Team engineers need the cluster's credentials too; RBAC scopes them in it.
            ml_engineer=list(
                dict.fromkeys(
                    [*groups.ml_engineer, *(m for ms in groups.team_engineers.values() for m in ms)]
                )
            ),
            log_reader=groups.log_reader,
        ),
        opts=opts,
    )
    SpotGpuQuotas(
        f"{env}-spot-quotas",
        SpotGpuQuotasArgs(
            project=project,
            region=settings.region,
            gpus=gcp_config.spot_gpu_quota,
            # Filed with the regional requests: a stack that files none manages quotas itself.
            all_regions=all_regions_needs(settings) if gcp_config.spot_gpu_quota else {},
            contact_email=next(iter(settings.alerts.emails), None),
        ),
        opts=opts,
    )
    observability = Observability(
        f"{env}-observability",
        ObservabilityArgs(
            project=project,
            cluster_name=cluster.name,
            runbook_base_url=settings.alerts.runbook_base_url,
            emails=settings.alerts.emails,
            preemptions_per_hour=gcp_config.alarms.preemptions_per_hour,
            gpu_idle_percent=gcp_config.alarms.gpu_idle_percent,
            labels=labels,
        ),
        opts=opts,
    )
    pulumi.export("cluster_name", cluster.name)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("checkpoint_bucket", bucket.bucket)
    pulumi.export(
        "training_service_accounts", {name: identity.email for name, identity in identities.items()}
    )
    pulumi.export("preemption_metric", observability.preemption_metric)
    pulumi.export("image_repository", repository.url)
    if cluster.nat_addresses:
        # Alert mail leaves through these: the SMTP relay must allow them.
        pulumi.export("nat_addresses", cluster.nat_addresses)
    pulumi.export(
        "node_pools",
        {
            "stable": stable_pool.name,
            **({"buffer": buffer_pool.name} if buffer_pool else {}),
            **{
                f"{pool.name}-{machine}": node_pool.name
                for (pool, machine), node_pool in gpu_pools.items()
            },
        },
    )
    relay = gcp_config.alert_email

    def pool_names(gpu_class: str, capacity: str) -> tuple[str, ...]:
        return tuple(
            class_pool_name(pool, machine)
            for pool, machine in gpu_pools
            if pool.gpu_class == gpu_class and pool.capacity == capacity
        )

    def buffer_names(gpu_class: str) -> tuple[str, ...]:
        if buffer_pool is None or buffer_pool.spec.gpu_class != gpu_class:
            return ()
        return (buffer_pool_name(buffer.machine_type),)

    compute_classes = ComputeClassesArgs(
        classes=tuple(
            ClassOrder(
                c.name,
                pool_names(c.name, "spot"),
                pool_names(c.name, "on-demand"),
                buffer_names(c.name),
            )
            for c in settings.gpu_classes
        ),
        active_migration=gcp_config.active_migration,
    )
    largest_gpu_machine = max(
        (machines[t].gpus for c in settings.gpu_classes for t in c.instance_types), default=1
    )
    # A ComputeClass names its pools: it comes once they exist.
    class_pools_built = [*gpu_pools.values(), *([buffer_pool] if buffer_pool else [])]
    pools_ready = pulumi.ResourceOptions(depends_on=class_pools_built)
    return Platform(
        cloud="gcp",
        region=settings.region,
        kubeconfig=cluster.kubeconfig,
        checkpoint_roots={
            team.name: bucket.bucket.apply(
                lambda bucket, prefix=team.checkpoint_prefix: f"gs://{bucket}/{prefix}"
            )
            for team in settings.teams
        },
        # The Spot pools' graceful shutdown sets the budget; GKE's is on the node, so no lag.
        notice_seconds=settings.notice_window().grace_s,
        notice_sources=NOTICE_SOURCES["gcp"],
        notice_lag_seconds=settings.notice_window().lag_s,
        image_repository=repository.url,
        alert_receiver={
            "email_configs": [
                {
                    "to": email,
                    "from": relay.sender,
                    "smarthost": relay.smarthost,
                    "require_tls": True,
                    "send_resolved": True,
                }
                for email in settings.alerts.emails
            ]
        },
        ready=[cluster, stable_pool, *identities.values()],
        service_account_annotations={
            name: {WORKLOAD_IDENTITY_ANNOTATION: identity.email}
            for name, identity in identities.items()
        },
        addons={
            "compute-classes": lambda name, opts: ComputeClasses(
                name, compute_classes, pulumi.ResourceOptions.merge(opts, pools_ready)
            ),
            "managed-prometheus": lambda name, opts: TrainingPodMonitoring(
                name, TrainingPodMonitoringArgs(local_ranks=largest_gpu_machine), opts
            ),
        },
        # The ClusterPodMonitoring's scrapes come from Managed Prometheus's collectors.
        metrics_scrapers=(COLLECTOR_PEER,),
        # The cluster autoscaler never scales down a node under a running training pod.
        training_pod_annotations=SAFE_TO_EVICT_FALSE,
        # GKE installs the NVIDIA driver and runs the device plugin on its GPU nodes.
        needs_device_plugin=False,
        compute_class_label=COMPUTE_CLASS_LABEL,
        team_role_bindings={
            team.name: {
                role: [rbac_subject(m) for m in members]
                for role, members in (
                    ("edit", groups.team_engineers.get(team.name, [])),
                    ("view", groups.log_reader),
                )
                if members
            }
            for team in settings.teams
        },
    )
