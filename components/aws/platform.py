"""The AWS half of the platform: everything the cloud provides, handed on as one `Platform`.

Order on an empty account: network and cluster, its network add-ons, the node groups, the add-ons
that run on nodes; storage, identities, the image repository, quotas, interruption plumbing and
alarms alongside. The Kubernetes layer waits for `Platform.ready`.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from components.aws.addons import NODE_ADDONS, ClusterAddons, ClusterAddonsArgs
from components.aws.cluster import Cluster, ClusterArgs
from components.aws.drill import SpotDrill, SpotDrillArgs
from components.aws.iam import (
    NodeRole,
    NodeRoleArgs,
    PlatformRoles,
    PlatformRolesArgs,
    PodIdentity,
    TeamEngineers,
    TeamTrainingRole,
    TeamTrainingRoleArgs,
    missing_principals,
)
from components.aws.interruption import InterruptionQueue, InterruptionQueueArgs
from components.aws.karpenter import (
    DO_NOT_DISRUPT,
    Karpenter,
    KarpenterArgs,
    KarpenterIdentity,
    KarpenterIdentityArgs,
)
from components.aws.nodepools import ManagedNodeGroupPool, ManagedNodeGroupPoolArgs
from components.aws.observability import Observability, ObservabilityArgs
from components.aws.quotas import GpuQuotas, GpuQuotasArgs, current_vcpus
from components.aws.registry import ImageRepository, ImageRepositoryArgs
from components.aws.spot_role import SpotServiceRole, SpotServiceRoleArgs
from components.aws.storage import CheckpointBucket, CheckpointBucketArgs
from components.catalog import catalog
from components.config import NOTICE_SOURCES, ConfigError, StackConfig
from components.config.aws import requested_gpu_vcpus
from components.config.capacity import creation_problems, starting_gpu_vcpus
from components.k8s import monitoring
from components.platform import Platform
from components.pools import CAPACITIES, class_pools, pool_specs, spot_pool
from components.tags import cost_tags
from components.versions import KUBERNETES_RELEASES


def build_aws(settings: StackConfig) -> Platform:
    """Network, cluster, add-ons, pools, checkpoint bucket, identities, image repository, quotas,
    interruption plumbing and alarms of an AWS stack; the Kubernetes layer gets them as one
    `Platform`, with Karpenter and its GPU pools as an add-on it builds on the cluster."""
    aws_config, env = settings.aws, settings.environment
    tags = cost_tags(settings.cost_tags, env)
    provider = aws.Provider("aws", region=settings.region, default_tags={"tags": tags})
    opts = pulumi.ResourceOptions(providers=[provider])
    account_id = aws.get_caller_identity_output(
        opts=pulumi.InvokeOutputOptions(provider=provider)
    ).account_id
    # Checks against the account, before any resource: a refused stack creates nothing.
    requested = requested_gpu_vcpus(aws_config)
    current = current_vcpus(sorted({*requested, *starting_gpu_vcpus(settings)}), provider)
    problems = creation_problems(settings, current) + missing_principals(
        settings.trusted_principals(),
        aws.get_caller_identity(opts=pulumi.InvokeOptions(provider=provider)).account_id,
        provider,
    )
    if problems:
        raise ConfigError(problems)

    cluster = Cluster(
        env,
        ClusterArgs(
            region=settings.region,
            zones=settings.zones,
            create=aws_config.cluster.create,
            existing=aws_config.cluster.existing,
            tags=tags,
        ),
        opts=opts,
    )
    node_role = NodeRole(
        f"{env}-node", NodeRoleArgs(cluster_name=aws_config.cluster.name, tags=tags), opts=opts
    )
    # Nodes join only once the network add-ons are there.
    pools = {
        spec.tier: ManagedNodeGroupPool(
            f"{env}-{spec.tier}",
            ManagedNodeGroupPoolArgs(
                spec=spec,
                cluster_name=cluster.name,
                node_role_arn=node_role.arn,
                subnet_ids=cluster.node_subnet_ids,
                kubernetes_version=cluster.version,
                tags=cost_tags(settings.cost_tags, env, capacity=spec.capacity),
            ),
            opts=pulumi.ResourceOptions(providers=[provider], depends_on=cluster.network_addons),
        )
        for spec in pool_specs(settings)
    }
    ready: list[pulumi.Resource] = [cluster, pools["stable"]]
    # Karpenter's spot launches need it; the Kubernetes layer, which installs Karpenter, waits.
    ready.append(
        SpotServiceRole(f"{env}-spot-service-role", SpotServiceRoleArgs(tags=tags), opts=opts)
    )
    create = aws_config.cluster.create
    if create is not None:
        ready.append(
            ClusterAddons(
                f"{env}-node-addons",
                ClusterAddonsArgs(
                    cluster_name=cluster.name,
                    release=KUBERNETES_RELEASES[create.version],
                    names=NODE_ADDONS,
                    cluster_arn=cluster.arn,
                    tags=tags,
                ),
                opts=pulumi.ResourceOptions(providers=[provider], depends_on=[pools["stable"]]),
            )
        )
    storage = aws_config.checkpoint_storage
    bucket = CheckpointBucket(
        f"{env}-checkpoints",
        CheckpointBucketArgs(
            noncurrent_version_days=storage.noncurrent_version_days,
            noncurrent_versions_to_keep=storage.noncurrent_versions_to_keep,
            abort_multipart_days=storage.abort_multipart_days,
            transitions=storage.transitions,
            kms_deletion_window_days=storage.kms_deletion_window_days,
            bucket_name=storage.bucket_name,
            tags=tags,
        ),
        opts=opts,
    )
    team_roles = {
        team.name: TeamTrainingRole(
            f"{env}-{team.name}-training",
            TeamTrainingRoleArgs(
                team=team.name,
                cluster_name=cluster.name,
                cluster_arn=cluster.arn,
                namespace=team.namespace,
                service_account=team.service_account,
                bucket_arn=bucket.arn,
                prefix=team.checkpoint_prefix,
                kms_key_arn=bucket.kms_key_arn,
                region=settings.region,
                tags=cost_tags(settings.cost_tags, env, team=team.name),
            ),
            opts=opts,
        )
        for team in settings.teams
    }
    principals = aws_config.principals
    roles = PlatformRoles(
        f"{env}-roles",
        PlatformRolesArgs(
            cluster_name=cluster.name,
            cluster_arn=cluster.arn,
            bucket_arn=bucket.arn,
            checkpoint_key_arn=bucket.kms_key_arn,
            team_namespaces=[team.namespace for team in settings.teams],
            platform_admin=principals.platform_admin,
            break_glass=principals.break_glass,
            engineers=tuple(
                TeamEngineers(team.name, team.namespace, tuple(team.engineers))
                for team in settings.teams
            ),
            log_reader=principals.log_reader,
            tags=tags,
        ),
        opts=opts,
    )
    repository = ImageRepository(
        f"{env}-training-image",
        ImageRepositoryArgs(repository_name=f"{aws_config.cluster.name}/trainer", tags=tags),
        opts=opts,
    )
    GpuQuotas(
        f"{env}-gpu-quotas",
        GpuQuotasArgs(
            vcpus=requested,
            current=current,
            open_requests=frozenset(aws_config.open_quota_requests),
        ),
        opts=opts,
    )
    interruption = InterruptionQueue(
        f"{env}-interruptions", InterruptionQueueArgs(tags=tags), opts=opts
    )
    karpenter_identity = KarpenterIdentity(
        f"{env}-karpenter-identity",
        KarpenterIdentityArgs(
            cluster_name=cluster.name,
            cluster_arn=cluster.arn,
            region=settings.region,
            interruption_queue_arn=interruption.queue_arn,
            tags=tags,
        ),
        opts=opts,
    )
    stable = pools["stable"]
    karpenter = KarpenterArgs(
        cluster_name=cluster.name,
        region=settings.region,
        interruption_queue_name=interruption.queue_name,
        node_role_name=karpenter_identity.node_role_name,
        subnet_ids=cluster.node_subnet_ids,
        security_group_ids=cluster.node_security_group_ids,
        pools=tuple(class_pools(settings)),
        ami_alias=aws_config.gpu_ami.alias,
        image_cache_snapshot=aws_config.gpu_ami.image_cache_snapshot,
        notice_seconds=settings.kubernetes.notice_for("aws"),
        tags={c: cost_tags(settings.cost_tags, env, capacity=c) for c in CAPACITIES},
        controller_node_labels=stable.spec.labels,
        # Two replicas on two stable nodes (the chart spreads them across nodes), one on one.
        controller_replicas=min(2, stable.spec.min_size),
    )
    alarms = aws_config.alarms
    observability = Observability(
        f"{env}-observability",
        ObservabilityArgs(
            account_id=account_id,
            cluster_name=cluster.name,
            region=settings.region,
            spot_interruption_rule=interruption.rule_names["spot-interruption"],
            rebalance_rule=interruption.rule_names["rebalance"],
            interruption_queue=interruption.queue_name,
            pool_groups={tier: pool.autoscaling_group_name for tier, pool in pools.items()},
            runbook_base_url=settings.alerts.runbook_base_url,
            emails=settings.alerts.emails,
            alertmanager=PodIdentity(
                cluster_name=cluster.name,
                cluster_arn=cluster.arn,
                namespace=monitoring.NAMESPACE,
                service_account=monitoring.ALERTMANAGER_SERVICE_ACCOUNT,
            ),
            interruptions_per_hour=alarms.interruptions_per_hour,
            queue_age_seconds=alarms.queue_age_seconds,
            gpu_idle_percent=alarms.gpu_idle_percent,
            tags=tags,
        ),
        opts=opts,
    )
    if aws_config.spot_drill is not None:
        drill = aws_config.spot_drill
        pool = spot_pool(settings, drill.gpu_class)  # the config names one of its classes
        spot_drill = SpotDrill(
            f"{env}-spot-drill",
            SpotDrillArgs(
                cluster_name=cluster.name, pool_name=pool.name, percent=drill.percent, tags=tags
            ),
            opts=opts,
        )
        pulumi.export("spot_drill_template_id", spot_drill.template_id)
    pulumi.export("cluster_name", cluster.name)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("checkpoint_bucket", bucket.bucket)
    pulumi.export("interruption_queue_url", interruption.queue_url)
    pulumi.export("training_role_arns", {name: role.arn for name, role in team_roles.items()})
    pulumi.export("role_arns", roles.arns)
    pulumi.export("alert_topic_arn", observability.topic_arn)
    pulumi.export("image_repository", repository.url)
    pulumi.export(
        "pool_autoscaling_groups",
        {tier: pool.autoscaling_group_name for tier, pool in pools.items()},
    )
    return Platform(
        cloud="aws",
        region=settings.region,
        kubeconfig=cluster.kubeconfig,
        checkpoint_roots={
            team.name: bucket.bucket.apply(
                lambda bucket, prefix=team.checkpoint_prefix: f"s3://{bucket}/{prefix}"
            )
            for team in settings.teams
        },
        notice_seconds=settings.notice_window().grace_s,
        notice_sources=NOTICE_SOURCES["aws"],
        notice_lag_seconds=settings.notice_window().lag_s,
        image_repository=repository.url,
        alert_receiver=sns_receiver(observability.topic_arn, settings.region),
        heartbeat_receiver=sns_receiver(observability.heartbeat_topic_arn, settings.region),
        storage_class=monitoring.StorageClassSpec(
            name="gp3-encrypted",
            provisioner="ebs.csi.aws.com",
            # Encrypted with the account's EBS key (aws/ebs), which the driver's managed
            # policy may use.
            parameters={"type": "gp3", "encrypted": "true"},
        ),
        # Pods get a Pod Identity role only if its association exists when they start: the
        # Karpenter controller's and Alertmanager's come first.
        ready=[*ready, karpenter_identity, observability],
        addons={"karpenter": lambda name, opts: Karpenter(name, karpenter, opts)},
        training_pod_annotations=DO_NOT_DISRUPT,
        efa_instance_types=efa_instance_types(settings),
    )


def efa_instance_types(settings: StackConfig) -> tuple[str, ...]:
    """The GPU classes' types with EFA: Karpenter attaches their interfaces to a node launched
    for pods that request them."""
    types = catalog("aws").instance_types
    return tuple(
        sorted({t for c in settings.gpu_classes for t in c.instance_types if types[t].efa})
    )


def sns_receiver(topic_arn: pulumi.Input[str], region: str) -> dict:
    """Alertmanager receiver settings that publish to an SNS topic, signed with the role bound to
    Alertmanager's service account."""
    return {
        "sns_configs": [
            {"topic_arn": topic_arn, "sigv4": {"region": region}, "send_resolved": True}
        ]
    }
