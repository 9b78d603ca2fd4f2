"""The GCP half of the platform: everything the cloud provides, handed on as one `Platform`.

Draft: it takes a `GcpStackConfig` until `StackConfig` carries the `gcp` section. The Spot pools
per GPU class come with the capacity model.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from components.config import NOTICE_SOURCES
from components.gcp.cluster import Cluster, ClusterArgs
from components.gcp.config import GcpStackConfig
from components.gcp.iam import (
    CheckpointWriterRole,
    CheckpointWriterRoleArgs,
    NodeServiceAccount,
    NodeServiceAccountArgs,
    PlatformGroups,
    PlatformGroupsArgs,
    TeamTrainingIdentity,
    TeamTrainingIdentityArgs,
    account_id,
)
from components.gcp.nodepools import GkeNodePool, GkeNodePoolArgs
from components.gcp.observability import Observability, ObservabilityArgs
from components.gcp.quotas import SpotGpuQuotas, SpotGpuQuotasArgs
from components.gcp.storage import CheckpointBucket, CheckpointBucketArgs
from components.platform import Platform
from components.pools import PoolSpec
from components.tags import cost_tags

# The annotation that lets a Kubernetes service account act as a Google service account.
WORKLOAD_IDENTITY_ANNOTATION = "iam.gke.io/gcp-service-account"


def build_gcp(settings: GcpStackConfig) -> Platform:
    """Network, cluster, stable pool, checkpoint bucket, identities, quotas and alerting of a GCP
    stack; the Kubernetes layer gets them as one `Platform`."""
    gcp_config, env, project = settings.gcp, settings.environment, settings.gcp.project
    labels = cost_tags(settings.cost_tags, env)
    provider = gcp.Provider("gcp", project=project, region=settings.region, default_labels=labels)
    opts = pulumi.ResourceOptions(providers=[provider])

    nodes = NodeServiceAccount(
        f"{env}-nodes",
        NodeServiceAccountArgs(project=project, account_id=account_id(env, "gke-nodes")),
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
        ),
        opts=opts,
    )
    stable = gcp_config.stable_pool
    stable_pool = GkeNodePool(
        f"{env}-stable",
        GkeNodePoolArgs(
            spec=PoolSpec(
                tier="stable",
                capacity="on-demand",
                instance_types=(stable.machine_type,),
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
        CheckpointWriterRoleArgs(
            project=project, role_id=f"spotTrainingCheckpoints_{env.replace('-', '_')}"
        ),
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
            ml_engineer=groups.ml_engineer,
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
    pulumi.export("node_pools", {"stable": stable_pool.name})
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
        notice_seconds=settings.kubernetes.notice_seconds
        or gcp_config.spot_shutdown.user_pods_seconds,
        notice_sources=NOTICE_SOURCES["gcp"],
        ready=[cluster, stable_pool],
        service_account_annotations={
            name: {WORKLOAD_IDENTITY_ANNOTATION: identity.email}
            for name, identity in identities.items()
        },
    )
