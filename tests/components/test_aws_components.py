"""Per component: secure defaults, wiring and validation, read from the previewed stacks."""

from __future__ import annotations

import inspect
import json

import pulumi_aws as aws
import pytest
from dependency_graph import DependencyGraph
from previewed import Preview
from stack_files import REPO_ROOT, stack_values

from components.aws.addons import NETWORK_ADDONS, NODE_ADDONS
from components.aws.cluster import ClusterArgs, kubeconfig
from components.aws.drill import DRILL_TAG
from components.aws.iam import TeamTrainingRoleArgs
from components.aws.interruption import EVENT_PATTERNS
from components.aws.karpenter import NAMESPACE, SERVICE_ACCOUNT
from components.aws.network import NetworkArgs
from components.aws.nodepools import ManagedNodeGroupPoolArgs
from components.aws.observability import ObservabilityArgs
from components.aws.quotas import QUOTA_CODES, GpuQuotasArgs
from components.aws.storage import CheckpointBucketArgs
from components.config import load_config
from components.k8s import monitoring
from components.pools import CAPACITY_TYPE_LABEL, GPU_CLASS_LABEL, POOL_LABEL, PoolSpec
from components.versions import (
    ADDON_NAMESPACES,
    KUBERNETES_RELEASES,
    KUBERNETES_VERSION,
    UPGRADE_SUPPORT_TYPE,
)
from spotctl.preview.resources import preview_program

PROD = load_config(stack_values("prod"))
POD_IDENTITY_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


def _policy(resource) -> dict:
    return json.loads(resource.inputs["policy"])


def _statements(document: dict) -> list[dict]:
    statements = document["Statement"]
    return statements if isinstance(statements, list) else [statements]


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


# --- checkpoint storage


def test_bucket_is_versioned_encrypted_private_and_tls_only(prod: Preview):
    bucket = prod.one("aws:s3/bucket:Bucket")
    name, arn = bucket.outputs["bucket"], bucket.outputs["arn"]
    assert bucket.inputs.get("forceDestroy") is False

    versioning = prod.one("aws:s3/bucketVersioning:BucketVersioning")
    assert versioning.inputs["bucket"] == name
    assert versioning.inputs["versioningConfiguration"]["status"] == "Enabled"

    encryption = prod.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )
    default = encryption.inputs["rules"][0]["applyServerSideEncryptionByDefault"]
    assert default["sseAlgorithm"] == "aws:kms"
    key = next(
        k for k in prod.of_type("aws:kms/key:Key") if k.outputs["arn"] == default["kmsMasterKeyId"]
    )
    assert key.inputs["enableKeyRotation"] is True

    block = prod.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    flags = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    assert all(block.inputs[flag] is True for flag in flags)

    ownership = prod.one("aws:s3/bucketOwnershipControls:BucketOwnershipControls")
    assert ownership.inputs["rule"]["objectOwnership"] == "BucketOwnerEnforced"

    (deny,) = _statements(_policy(prod.one("aws:s3/bucketPolicy:BucketPolicy")))
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert sorted(deny["Resource"]) == [arn, f"{arn}/*"]


def test_lifecycle_follows_config(prod: Preview, stack_preview):
    storage = PROD.aws.checkpoint_storage
    rules = {
        r["id"]: r
        for r in prod.one(
            "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration"
        ).inputs["rules"]
    }
    assert all(rule["status"] == "Enabled" for rule in rules.values())
    noncurrent = rules["expire-noncurrent-versions"]["noncurrentVersionExpiration"]
    assert noncurrent["noncurrentDays"] == storage.noncurrent_version_days
    assert noncurrent["newerNoncurrentVersions"] == storage.noncurrent_versions_to_keep
    abort = rules["abort-incomplete-multipart"]["abortIncompleteMultipartUpload"]
    assert abort["daysAfterInitiation"] == storage.abort_multipart_days
    transitions = rules["transition-old-checkpoints"]["transitions"]
    assert [(t["days"], t["storageClass"]) for t in transitions] == [
        (t.days, t.storage_class) for t in storage.transitions
    ]
    dev_rules = (
        stack_preview("dev")
        .one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
        .inputs["rules"]
    )
    assert "transition-old-checkpoints" not in {r["id"] for r in dev_rules}


# --- IAM


def test_no_policy_allows_everything_on_everything(prod: Preview):
    policies = [
        r
        for r in prod.resources
        if "policy" in r.inputs
        and r.type.startswith("aws:")
        and r.type != "aws:ecr/lifecyclePolicy:LifecyclePolicy"  # image rules, not IAM
    ]
    policies += prod.of_type("aws:iam/role:Role")
    assert len(policies) > 10
    for resource in policies:
        field = "assumeRolePolicy" if resource.type == "aws:iam/role:Role" else "policy"
        for statement in _statements(json.loads(resource.inputs[field])):
            if statement["Effect"] != "Allow":
                continue
            wildcard_action = "*" in _as_list(statement.get("Action", []))
            wildcard_resource = "*" in _as_list(statement.get("Resource", []))
            assert not (wildcard_action and wildcard_resource), resource.name


@pytest.mark.parametrize("team", PROD.teams, ids=lambda t: t.name)
def test_team_role_reaches_only_its_prefix_and_never_deletes_versions(prod: Preview, team):
    bucket_arn = prod.one("aws:s3/bucket:Bucket").outputs["arn"]
    policy = _policy(prod.one("aws:iam/rolePolicy:RolePolicy", f"-{team.name}-training-policy"))
    statements = _statements(policy)
    s3_allows = [
        s
        for s in statements
        if s["Effect"] == "Allow" and any(a.startswith("s3:") for a in _as_list(s["Action"]))
    ]
    for statement in s3_allows:
        for resource in _as_list(statement["Resource"]):
            assert resource in (f"{bucket_arn}/{team.checkpoint_prefix}/*", bucket_arn)
        if statement["Resource"] == bucket_arn:  # listing only below `<prefix>/`
            prefixes = statement["Condition"]["StringLike"]["s3:prefix"]
            assert prefixes == [f"{team.checkpoint_prefix}/*"]
    assert all("s3:DeleteObjectVersion" not in _as_list(s["Action"]) for s in s3_allows)
    assert any(
        s["Effect"] == "Deny" and "s3:DeleteObjectVersion" in _as_list(s["Action"])
        for s in statements
    )
    # The bucket key decrypts this prefix's objects only, and only through S3.
    (kms,) = [s for s in statements if any(a.startswith("kms:") for a in _as_list(s["Action"]))]
    assert kms["Condition"] == {
        "StringEquals": {"kms:ViaService": f"s3.{PROD.region}.amazonaws.com"},
        "StringLike": {
            "kms:EncryptionContext:aws:s3:arn": f"{bucket_arn}/{team.checkpoint_prefix}/*"
        },
    }

    role = prod.one("aws:iam/role:Role", f"-{team.name}-training")
    trust = _statements(json.loads(role.inputs["assumeRolePolicy"]))[0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-namespace"] == (
        team.namespace
    )
    association = prod.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", f"-{team.name}-"
    )
    assert association.inputs["namespace"] == team.namespace
    assert association.inputs["serviceAccount"] == team.service_account
    assert association.inputs["roleArn"] == role.outputs["arn"]


def test_bucket_encryption_names_the_object_to_kms(prod: Preview):
    """Without an S3 Bucket Key, KMS sees each object's ARN: what the team conditions need."""
    encryption = prod.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )
    assert encryption.inputs["rules"][0]["bucketKeyEnabled"] is False


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_pod_role_trusts_only_its_cluster_and_service_account(stack_preview, stack):
    preview = stack_preview(stack)
    cluster_arn = preview.one("aws:eks/cluster:Cluster").outputs["arn"]
    associations = {
        a.inputs["roleArn"]: a.inputs for a in preview.of_type(POD_IDENTITY_ASSOCIATION)
    }
    # EKS add-ons that call AWS create their association themselves.
    for addon in preview.of_type("aws:eks/addon:Addon"):
        for association in addon.inputs.get("podIdentityAssociations", []):
            namespace = ADDON_NAMESPACES[addon.inputs["addonName"]]
            associations[association["roleArn"]] = {**association, "namespace": namespace}
    roles = preview.of_type("aws:iam/role:Role")
    pod_roles = [r for r in roles if "pods.eks" in r.inputs["assumeRolePolicy"]]
    # Teams, the Karpenter controller, Alertmanager and the EBS CSI driver.
    assert len(pod_roles) == len(load_config(stack_values(stack)).teams) + 3
    for role in pod_roles:
        (trust,) = _statements(json.loads(role.inputs["assumeRolePolicy"]))
        association = associations[role.outputs["arn"]]
        assert trust["Condition"] == {
            "StringEquals": {
                "aws:SourceAccount": cluster_arn.split(":")[4],
                "aws:RequestTag/eks-cluster-arn": cluster_arn,
                "aws:RequestTag/kubernetes-namespace": association["namespace"],
                "aws:RequestTag/kubernetes-service-account": association["serviceAccount"],
            }
        }, role.name


def test_human_roles_trust_configured_principals(prod: Preview):
    principals = PROD.aws.principals
    expected = {
        "platform-admin": principals.platform_admin,
        "break-glass": principals.break_glass,
        "log-reader": principals.log_reader,
        **{f"ml-engineer-{team.name}": team.engineers for team in PROD.teams},
    }
    for role_name, allowed in expected.items():
        role = prod.one("aws:iam/role:Role", f"-roles-{role_name}")
        trust = _statements(json.loads(role.inputs["assumeRolePolicy"]))[0]
        assert sorted(_as_list(trust["Principal"]["AWS"])) == sorted(allowed)
    glass = prod.one("aws:iam/role:Role", "-roles-break-glass")
    trust = _statements(json.loads(glass.inputs["assumeRolePolicy"]))[0]
    assert trust["Condition"] == {"Bool": {"aws:MultiFactorAuthPresent": "true"}}
    log_reader = _policy(prod.one("aws:iam/rolePolicy:RolePolicy", "-roles-log-reader"))
    actions = {a for s in _statements(log_reader) for a in _as_list(s["Action"])}
    assert actions and all(a.startswith("logs:") for a in actions)


def test_each_team_engineer_role_edits_only_its_namespace(prod: Preview):
    scopes = {
        a.inputs["principalArn"]: (a.inputs["policyArn"].rsplit("/", 1)[1], a.inputs["accessScope"])
        for a in prod.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    }
    for team in PROD.teams:
        role = prod.one("aws:iam/role:Role", f"-roles-ml-engineer-{team.name}").outputs["arn"]
        assert scopes[role] == (
            "AmazonEKSEditPolicy",
            {"type": "namespace", "namespaces": [team.namespace]},
        )
    admin = prod.one("aws:iam/role:Role", "-roles-platform-admin").outputs["arn"]
    assert scopes[admin] == ("AmazonEKSClusterAdminPolicy", {"type": "cluster"})
    glass = prod.one("aws:iam/role:Role", "-roles-break-glass").outputs["arn"]
    assert glass not in scopes  # break-glass is for the bucket, not the cluster


def test_platform_admin_restores_checkpoints_but_never_destroys_them(prod: Preview):
    key_arn = prod.one("aws:kms/key:Key", "-checkpoints-key").outputs["arn"]
    statements = _statements(_policy(prod.one("aws:iam/rolePolicy:RolePolicy", "-platform-admin")))
    allowed = {a for s in statements if s["Effect"] == "Allow" for a in _as_list(s["Action"])}
    denied = {a for s in statements if s["Effect"] == "Deny" for a in _as_list(s["Action"])}
    assert {"s3:GetObjectVersion", "s3:PutObject", "kms:Decrypt"} <= allowed
    assert not any(a == "s3:*" or a.startswith("s3:Delete") for a in allowed)
    destructive = {"s3:DeleteObjectVersion", "s3:PutBucketVersioning", "s3:DeleteBucketPolicy"}
    assert destructive <= denied
    (key_grant,) = [s for s in statements if s.get("Sid") == "UseCheckpointKey"]
    assert key_grant["Resource"] == key_arn
    glass = _statements(_policy(prod.one("aws:iam/rolePolicy:RolePolicy", "-break-glass")))
    assert destructive <= {a for s in glass for a in _as_list(s["Action"])}


def test_node_role_has_the_worker_policies_and_no_account_wide_reads(prod: Preview):
    (node_role,) = [r for r in prod.of_type("aws:iam/role:Role") if r.name == "prod-node"]
    attached = {
        a.inputs["policyArn"].rsplit("/", 1)[1]
        for a in prod.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.inputs["role"] == node_role.outputs["name"]
    }
    assert attached == {
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryPullOnly",
    }
    agents = _statements(_policy(prod.one("aws:iam/rolePolicy:RolePolicy", "prod-node-agents")))
    actions = {a for s in agents for a in _as_list(s["Action"])}
    assert not any(a.startswith("ssm:GetParameter") for a in actions)
    assert "logs:PutRetentionPolicy" not in actions
    for statement in agents:
        if any(a.startswith("logs:") for a in _as_list(statement["Action"])):
            cluster = PROD.aws.cluster.name
            assert all(f"/aws/containerinsights/{cluster}/" in r for r in statement["Resource"])


# --- node pools


def _zones_of(prod: Preview, subnet_ids: list[str]) -> set[str]:
    zones = {s.id: s.inputs["availabilityZone"] for s in prod.of_type("aws:ec2/subnet:Subnet")}
    return {zones[subnet_id] for subnet_id in subnet_ids}


def test_stable_pool_is_on_demand_untainted_and_in_every_zone(prod: Preview):
    group = prod.one("aws:eks/nodeGroup:NodeGroup", "-stable-")
    assert group.inputs["capacityType"] == "ON_DEMAND"
    assert not group.inputs.get("taints")
    assert group.inputs["labels"] == {POOL_LABEL: "stable", CAPACITY_TYPE_LABEL: "on-demand"}
    assert group.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    assert _zones_of(prod, group.inputs["subnetIds"]) == set(PROD.zones)


def test_gpu_capacity_is_karpenter_s_no_spot_node_group(prod: Preview):
    groups = prod.of_type("aws:eks/nodeGroup:NodeGroup")
    assert {g.inputs["capacityType"] for g in groups} == {"ON_DEMAND"}
    assert len(groups) == 2  # stable and buffer


def test_node_groups_launch_through_a_template_that_tags_instances_and_keeps_imds_local(
    prod: Preview,
):
    """Node group tags never reach the instances; the launch template's tag specifications do.
    IMDSv2 with hop limit 1: pods reach neither IMDS nor the node role's credentials."""
    for group in prod.of_type("aws:eks/nodeGroup:NodeGroup"):
        template = next(
            t
            for t in prod.of_type("aws:ec2/launchTemplate:LaunchTemplate")
            if t.id == group.inputs["launchTemplate"]["id"]
        )
        assert group.inputs["launchTemplate"]["version"] == "1"
        assert "diskSize" not in group.inputs
        specs = {s["resourceType"]: s["tags"] for s in template.inputs["tagSpecifications"]}
        assert set(specs) == {"instance", "volume"}
        assert specs["instance"] == group.inputs["tags"] and specs["instance"]["env"] == "prod"
        assert template.inputs["metadataOptions"] == {
            "httpEndpoint": "enabled",
            "httpTokens": "required",
            "httpPutResponseHopLimit": 1,
        }
        (root,) = template.inputs["blockDeviceMappings"]
        assert root["ebs"]["encrypted"] == "true" and root["ebs"]["volumeType"] == "gp3"


def test_buffer_pool_is_a_gpu_class_and_scales_on_its_schedule(prod: Preview):
    group = prod.one("aws:eks/nodeGroup:NodeGroup", "-buffer-")
    # g6e: L40S GPUs, so training of class l40s-48gb runs on the buffer when it is free.
    assert group.inputs["labels"][GPU_CLASS_LABEL] == "l40s-48gb"
    assert group.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    asg = group.outputs["resources"][0]["autoscalingGroups"][0]["name"]
    actions = {
        s.inputs["scheduledActionName"]: s
        for s in prod.of_type("aws:autoscaling/schedule:Schedule")
    }
    assert set(actions) == {a.name for a in PROD.aws.pools.buffer.schedule}
    for configured in PROD.aws.pools.buffer.schedule:
        action = actions[configured.name].inputs
        assert action["autoscalingGroupName"] == asg
        assert action["recurrence"] == configured.recurrence
        assert action["desiredCapacity"] == configured.desired_size


def test_dev_has_one_node_group_and_quotas_for_its_class(stack_preview):
    dev = stack_preview("dev")
    assert not dev.of_type("aws:autoscaling/schedule:Schedule")
    assert len(dev.of_type("aws:eks/nodeGroup:NodeGroup")) == 1
    quotas = {
        q.inputs["quotaCode"]: q.inputs["value"]
        for q in dev.of_type("aws:servicequotas/serviceQuota:ServiceQuota")
    }
    assert quotas == {
        QUOTA_CODES[("spot", "g-family")]: 64,
        QUOTA_CODES[("on-demand", "g-family")]: 32,
    }


# --- quotas, interruption, observability


def test_gpu_quota_requests_spot_and_on_demand(prod: Preview):
    quotas = {
        q.inputs["quotaCode"]: q.inputs
        for q in prod.of_type("aws:servicequotas/serviceQuota:ServiceQuota")
    }
    requested = {
        ("spot", "p5-family"): PROD.aws.spot_gpu_quota.p5_family_vcpus,
        ("spot", "g-family"): PROD.aws.spot_gpu_quota.g_family_vcpus,
        ("on-demand", "p-family"): PROD.aws.on_demand_gpu_quota.p_family_vcpus,
        ("on-demand", "g-family"): PROD.aws.on_demand_gpu_quota.g_family_vcpus,
    }
    # The preview's account is a new one: nothing granted, so each request is the configured one.
    assert quotas == {
        QUOTA_CODES[key]: {"serviceCode": "ec2", "quotaCode": QUOTA_CODES[key], "value": vcpus}
        for key, vcpus in requested.items()
    }
    # Filed once: a partial grant read back later never files the request again.
    for quota in prod.of_type("aws:servicequotas/serviceQuota:ServiceQuota"):
        assert quota.ignore_changes == ["value"]


def test_interruption_events_reach_the_queue(prod: Preview):
    queue = prod.one("aws:sqs/queue:Queue")
    rules = prod.of_type("aws:cloudwatch/eventRule:EventRule")
    detail_types = {t for r in rules for t in json.loads(r.inputs["eventPattern"])["detail-type"]}
    assert detail_types == {
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
        "AWS Health Event",
    }
    targets = prod.of_type("aws:cloudwatch/eventTarget:EventTarget")
    assert {t.inputs["rule"] for t in targets} == {r.outputs["name"] for r in rules}
    assert all(t.inputs["arn"] == queue.outputs["arn"] for t in targets)

    statements = _statements(_policy(prod.one("aws:sqs/queuePolicy:QueuePolicy")))
    (allow,) = [s for s in statements if s["Effect"] == "Allow"]
    assert "events.amazonaws.com" in allow["Principal"]["Service"]
    assert allow["Action"] == "sqs:SendMessage" and allow["Resource"] == queue.outputs["arn"]
    assert sorted(allow["Condition"]["ArnEquals"]["aws:SourceArn"]) == sorted(
        r.outputs["arn"] for r in rules
    )
    assert queue.inputs["sqsManagedSseEnabled"] is True


def test_alarms_notify_the_topic_and_name_a_runbook(prod: Preview):
    topic = prod.one("aws:sns/topic:Topic", "-alerts")
    alarms = prod.of_type("aws:cloudwatch/metricAlarm:MetricAlarm")
    assert len(alarms) >= 3
    base = PROD.alerts.runbook_base_url
    for alarm in alarms:
        assert alarm.inputs["alarmActions"] == [topic.outputs["arn"]]
        runbook = alarm.inputs["alarmDescription"].split("Runbook: ")[1]
        assert runbook == f"{base}/runbooks/aws/{alarm.name.rsplit('-', 1)[1]}.md"
        assert (REPO_ROOT / runbook.removeprefix(f"{base}/")).is_file(), runbook
    spot = next(a for a in alarms if a.name.endswith("SpotInterruptionsHigh"))
    assert spot.inputs["threshold"] == PROD.aws.alarms.interruptions_per_hour
    subscriptions = prod.of_type("aws:sns/topicSubscription:TopicSubscription")
    assert sorted(s.inputs["endpoint"] for s in subscriptions) == sorted(PROD.alerts.emails)


def test_cloudwatch_can_publish_to_the_encrypted_topic(prod: Preview):
    """The AWS-managed SNS key does not let CloudWatch publish; the topic's own key does."""
    topic = prod.one("aws:sns/topic:Topic", "-alerts")
    key = prod.one("aws:kms/key:Key", "-alerts-key")
    assert topic.inputs["kmsMasterKeyId"] == key.outputs["arn"]
    assert key.inputs["enableKeyRotation"] is True
    grants = [
        s
        for s in _statements(_policy(key))
        if s["Effect"] == "Allow" and s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert grants and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(grants[0]["Action"])
    topic_policy = prod.one("aws:sns/topicPolicy:TopicPolicy", "-alerts-policy")
    assert topic_policy.inputs["arn"] == topic.outputs["arn"]
    (publish,) = [s for s in _statements(_policy(topic_policy)) if s["Effect"] == "Allow"]
    assert publish["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert publish["Action"] == "sns:Publish"
    account = prod.one("aws:eks/cluster:Cluster").outputs["arn"].split(":")[4]
    assert publish["Condition"]["StringEquals"] == {"aws:SourceAccount": account}


def test_alertmanager_may_publish_to_the_topic_and_the_heartbeat(prod: Preview):
    topic = prod.one("aws:sns/topic:Topic", "-alerts").outputs["arn"]
    heartbeat = prod.one("aws:sns/topic:Topic", "-heartbeat").outputs["arn"]
    key = prod.one("aws:kms/key:Key", "-alerts-key").outputs["arn"]
    association = prod.one(POD_IDENTITY_ASSOCIATION, "-alertmanager")
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == (
        monitoring.NAMESPACE,
        monitoring.ALERTMANAGER_SERVICE_ACCOUNT,
    )
    grants = {
        (a, resource)
        for s in _statements(_policy(prod.one("aws:iam/rolePolicy:RolePolicy", "-alertmanager")))
        for a in _as_list(s["Action"])
        for resource in _as_list(s["Resource"])
    }
    assert grants == {
        ("sns:Publish", topic),
        ("sns:Publish", heartbeat),
        ("kms:Decrypt", key),
        ("kms:GenerateDataKey", key),
    }
    # The heartbeat topic takes TLS only, like the alert topic.
    (deny,) = _statements(_policy(prod.one("aws:sns/topicPolicy:TopicPolicy", "-heartbeat")))
    assert deny["Effect"] == "Deny" and deny["Condition"] == {
        "Bool": {"aws:SecureTransport": "false"}
    }


def test_image_repository_is_immutable_scanned_and_encrypted(prod: Preview):
    repository = prod.one("aws:ecr/repository:Repository")
    assert repository.inputs["name"] == f"{PROD.aws.cluster.name}/trainer"
    assert repository.inputs["imageTagMutability"] == "IMMUTABLE"
    assert repository.inputs["imageScanningConfiguration"] == {"scanOnPush": True}
    assert repository.inputs["encryptionConfigurations"] == [{"encryptionType": "KMS"}]
    rules = json.loads(prod.one("aws:ecr/lifecyclePolicy:LifecyclePolicy").inputs["policy"])
    assert [r["selection"]["tagStatus"] for r in rules["rules"]] == ["untagged"]


def test_dashboard_shows_interruptions_pool_sizes_and_idle_capacity(prod: Preview):
    body = json.loads(prod.one("aws:cloudwatch/dashboard:Dashboard").inputs["dashboardBody"])
    titles = " | ".join(w["properties"]["title"] for w in body["widgets"])
    for wanted in ("interruptions per hour", "Pool sizes", "Idle GPU"):
        assert wanted in titles
    pools = next(w for w in body["widgets"] if "Pool sizes" in w["properties"]["title"])
    groups = {
        g.outputs["resources"][0]["autoscalingGroups"][0]["name"]
        for g in prod.of_type("aws:eks/nodeGroup:NodeGroup")
    }
    assert {m[3] for m in pools["properties"]["metrics"]} == groups


# --- cluster


def test_cluster_encrypts_secrets_logs_and_states_its_endpoint(prod: Preview, stack_preview):
    cluster = prod.one("aws:eks/cluster:Cluster")
    assert cluster.inputs["name"] == PROD.aws.cluster.create.name
    key_arn = cluster.inputs["encryptionConfig"]["provider"]["keyArn"]
    key = next(k for k in prod.of_type("aws:kms/key:Key") if k.outputs["arn"] == key_arn)
    assert key.inputs["enableKeyRotation"] is True
    assert {"api", "audit"} <= set(cluster.inputs["enabledClusterLogTypes"])
    assert cluster.inputs["accessConfig"]["authenticationMode"] == "API"
    for stack in ("dev", "prod"):
        config = load_config(stack_values(stack)).aws.cluster.create
        vpc = stack_preview(stack).one("aws:eks/cluster:Cluster").inputs["vpcConfig"]
        assert vpc["endpointPrivateAccess"] is True
        assert vpc["endpointPublicAccess"] is bool(config.public_endpoint_cidrs)
        assert vpc["publicAccessCidrs"] == config.public_endpoint_cidrs


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_versions_come_from_the_table_and_nodes_follow_the_control_plane(stack_preview, stack):
    preview = stack_preview(stack)
    cluster = preview.one("aws:eks/cluster:Cluster")
    assert cluster.inputs["version"] == KUBERNETES_VERSION
    assert cluster.inputs["upgradePolicy"] == {"supportType": UPGRADE_SUPPORT_TYPE}
    assert cluster.inputs["bootstrapSelfManagedAddons"] is False
    for group in preview.of_type("aws:eks/nodeGroup:NodeGroup"):
        assert group.inputs["version"] == cluster.outputs["version"], group.name
    addons = {a.inputs["addonName"]: a for a in preview.of_type("aws:eks/addon:Addon")}
    pinned = KUBERNETES_RELEASES[KUBERNETES_VERSION].addons
    assert {name: a.inputs["addonVersion"] for name, a in addons.items()} == pinned
    cni = json.loads(addons["vpc-cni"].inputs["configurationValues"])
    assert cni["enableNetworkPolicy"] == "true"


def test_add_ons_come_up_around_the_nodes(prod: Preview):
    """Network add-ons before any node group (a node without a CNI never gets Ready); the
    add-ons that run as pods after the stable nodes."""
    graph = DependencyGraph(prod.resources)
    addons = {a.inputs["addonName"]: a for a in prod.of_type("aws:eks/addon:Addon")}
    stable = prod.one("aws:eks/nodeGroup:NodeGroup", "-stable-")
    for group in prod.of_type("aws:eks/nodeGroup:NodeGroup"):
        for name in NETWORK_ADDONS:
            assert graph.waits_for(group, addons[name]), (group.name, name)
    for name in NODE_ADDONS:
        assert graph.waits_for(addons[name], stable), name


def test_network_has_private_and_public_subnet_per_zone(prod: Preview):
    subnets = prod.of_type("aws:ec2/subnet:Subnet")
    for kind in ("private", "public"):
        zones = [s.inputs["availabilityZone"] for s in subnets if f"-{kind}-" in s.name]
        assert sorted(zones) == sorted(PROD.zones)
    cidrs = [s.inputs["cidrBlock"] for s in subnets]
    assert len(set(cidrs)) == len(cidrs)


def test_private_egress_per_zone_and_s3_bypasses_nat(prod: Preview, stack_preview):
    assert len(prod.of_type("aws:ec2/natGateway:NatGateway")) == len(PROD.zones)
    assert len(stack_preview("dev").of_type("aws:ec2/natGateway:NatGateway")) == 1
    private_tables = [
        t for t in prod.of_type("aws:ec2/routeTable:RouteTable") if "-private-" in t.name
    ]
    nat_ids = {n.id for n in prod.of_type("aws:ec2/natGateway:NatGateway")}
    assert {t.inputs["routes"][0]["natGatewayId"] for t in private_tables} == nat_ids
    endpoint = prod.one("aws:ec2/vpcEndpoint:VpcEndpoint", "-s3")
    assert endpoint.inputs["serviceName"] == f"com.amazonaws.{PROD.region}.s3"
    assert endpoint.inputs["vpcEndpointType"] == "Gateway" and endpoint.id.startswith("vpce-")
    assert sorted(endpoint.inputs["routeTableIds"]) == sorted(t.id for t in private_tables)


def test_attach_to_existing_cluster(program_copy):
    values = stack_values("dev")
    subnets = ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]
    values["aws"]["cluster"] = {"existing": {"name": "shared-eks", "subnet_ids": subnets}}
    resources = preview_program(program_copy("attach", values), "attach")
    types = {r.type for r in resources}
    assert "aws:eks/cluster:Cluster" not in types and "aws:ec2/vpc:Vpc" not in types
    groups = [r for r in resources if r.type == "aws:eks/nodeGroup:NodeGroup"]
    assert groups and all(g.inputs["clusterName"] == "shared-eks" for g in groups)
    assert all(g.inputs["subnetIds"] == subnets for g in groups)


def test_kubeconfig_authenticates_with_short_lived_tokens():
    config = json.loads(kubeconfig("c1", "https://example.eks", "Q0E=", region="eu-west-1"))
    assert config["clusters"][0]["cluster"]["server"] == "https://example.eks"
    user = config["users"][0]["user"]
    assert "token" not in user and user["exec"]["command"] == "aws"
    assert user["exec"]["args"][-2:] == ["--region", "eu-west-1"]


# --- cost tags


def _accepts_tags(token: str) -> bool:
    module, name = token.split(":")[1].split("/")[0], token.split(":")[2]
    cls = getattr(getattr(aws, module), name)
    return "tags" in inspect.signature(cls._internal_init).parameters


# Looking the classes up imports pulumi-aws modules, which warn about every deprecated class
# they define; what the program uses is checked by the strict previews.
@pytest.mark.filterwarnings("ignore:.* has been deprecated in favor of :DeprecationWarning")
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_taggable_resource_carries_cost_tags(stack_preview, stack):
    preview = stack_preview(stack)
    config = load_config(stack_values(stack))
    taggable = [r for r in preview.resources if r.custom and r.type.startswith("aws:")]
    taggable = [r for r in taggable if _accepts_tags(r.type)]
    assert len(taggable) > 20
    for resource in taggable:
        tags = resource.inputs.get("tags") or {}
        assert tags.get("env") == stack, resource.name
        assert tags.get("team") and tags.get("capacity-type"), resource.name
        assert config.cost_tags.items() <= tags.items(), resource.name
    stable = preview.one("aws:eks/nodeGroup:NodeGroup", "-stable-")
    assert stable.inputs["tags"]["capacity-type"] == "on-demand"
    for team in config.teams:
        role = preview.one("aws:iam/role:Role", f"-{team.name}-training")
        assert role.inputs["tags"]["team"] == team.name


# --- validation at construction


def _spec(**overrides) -> PoolSpec:
    fields = dict(
        tier="buffer",
        instance_types=("g6e.12xlarge",),
        architecture="x86_64",
        gpus=True,
        min_size=0,
        max_size=2,
        desired_size=0,
        disk_size_gib=100,
    )
    return PoolSpec(**{**fields, **overrides})


def _observability(**overrides) -> ObservabilityArgs:
    fields = dict(
        account_id="123456789012",
        cluster_name="c",
        region="r",
        spot_interruption_rule="s",
        rebalance_rule="b",
        interruption_queue="q",
        pool_groups={},
        runbook_base_url="https://example.com/repo",
        emails=["oncall@example.com"],
    )
    return ObservabilityArgs(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: NetworkArgs(cluster_name="c", region="r", zones=[], cidr="10.0.0.0/16"),
            "zones",
        ),
        (lambda: ClusterArgs(region="us-east-1", zones=["us-east-1a"]), "exactly one"),
        (
            lambda: ManagedNodeGroupPoolArgs(
                spec=_spec(architecture="riscv64"),
                cluster_name="c",
                node_role_arn="r",
                subnet_ids=[],
                kubernetes_version="1.33",
            ),
            "no EKS AMI for 'riscv64'",
        ),
        (
            lambda: ManagedNodeGroupPoolArgs(
                spec=_spec(min_size=3),
                cluster_name="c",
                node_role_arn="r",
                subnet_ids=[],
                kubernetes_version="1.33",
            ),
            "min <= desired <= max",
        ),
        (
            lambda: TeamTrainingRoleArgs(
                team="t",
                cluster_name="c",
                cluster_arn="arn:aws:eks:us-east-1:123456789012:cluster/c",
                namespace="n",
                service_account="s",
                bucket_arn="b",
                prefix="*",
                kms_key_arn="k",
                region="us-east-1",
            ),
            "without wildcards",
        ),
        (lambda: CheckpointBucketArgs(abort_multipart_days=0), "abort_multipart_days"),
        (lambda: CheckpointBucketArgs(kms_deletion_window_days=3), "kms_deletion_window_days"),
        (lambda: GpuQuotasArgs(vcpus={("spot", "p5-family"): 0}), "at least 1 vCPU"),
        (lambda: GpuQuotasArgs(vcpus={("spot", "trn-family"): 8}), "unknown quota"),
        (lambda: GpuQuotasArgs(vcpus={("spot", "p5-family"): 8}), "no current value"),
        (lambda: _observability(gpu_idle_percent=100), "gpu_idle_percent"),
        (lambda: _observability(emails=[]), "reach no one"),
    ],
)
def test_component_args_reject_unsafe_values(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_event_patterns_are_the_ones_karpenter_handles():
    sources = {p["source"][0] for p in EVENT_PATTERNS.values()}
    assert sources == {"aws.ec2", "aws.health"}


def test_karpenter_controller_identity(prod: Preview):
    """Pod Identity for the controller's service account; it consumes only its queue, passes only
    the nodes' role, and launches and terminates only instances tagged for this cluster."""
    queue = prod.one("aws:sqs/queue:Queue")
    cluster = prod.one("aws:eks/cluster:Cluster")
    role = prod.one("aws:iam/role:Role", "-karpenter-identity-controller")
    trust = _statements(json.loads(role.inputs["assumeRolePolicy"]))[0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    association = prod.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "-karpenter-identity-controller"
    )
    assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == (
        NAMESPACE,
        SERVICE_ACCOUNT,
    )
    assert association.inputs["roleArn"] == role.outputs["arn"]
    statements = {
        s["Sid"]: s
        for s in _statements(
            _policy(prod.one("aws:iam/rolePolicy:RolePolicy", "-karpenter-identity-controller"))
        )
    }
    assert statements["ConsumeInterruptionQueue"]["Resource"] == queue.outputs["arn"]
    node_role = prod.one("aws:iam/role:Role", "-karpenter-identity-node")
    assert statements["PassOnlyTheNodeRole"]["Resource"] == node_role.outputs["arn"]
    owned = f"aws:ResourceTag/kubernetes.io/cluster/{cluster.outputs['name']}"
    assert statements["DeleteOnlyWhatItLaunched"]["Condition"]["StringEquals"] == {owned: "owned"}
    assert statements["FindTheApiServer"]["Resource"] == cluster.outputs["arn"]
    # Its nodes join the cluster through an access entry for their role.
    entry = prod.one("aws:eks/accessEntry:AccessEntry", "-karpenter-identity-node")
    assert (entry.inputs["type"], entry.inputs["principalArn"]) == (
        "EC2_LINUX",
        node_role.outputs["arn"],
    )


def test_the_cloud_drill_interrupts_a_share_of_one_class_spot_nodes_and_nothing_else(
    prod: Preview, stack_preview
):
    """AWS FIS (actions reference, `aws:ec2:send-spot-instance-interruptions`; the EC2 spot
    workshop's template): spot instances found by Karpenter's tags, PERCENT(n) of the running
    ones, a two-minute notice; the role may interrupt only instances with both tags."""
    drill = PROD.aws.spot_drill
    template = prod.one("aws:fis/experimentTemplate:ExperimentTemplate")
    (target,) = template.inputs["targets"]
    assert target["resourceType"] == "aws:ec2:spot-instance"
    assert target["selectionMode"] == f"PERCENT({drill.percent})"
    assert target["filters"] == [{"path": "State.Name", "values": ["running"]}]
    tags = {t["key"]: t["value"] for t in target["resourceTags"]}
    cluster = PROD.aws.cluster.create.name
    assert tags == {
        "karpenter.sh/nodepool": f"{drill.gpu_class}-spot",
        "eks:eks-cluster-name": cluster,
    }
    (action,) = template.inputs["actions"]
    assert action["actionId"] == "aws:ec2:send-spot-instance-interruptions"
    assert action["parameters"] == [{"key": "durationBeforeInterruption", "value": "PT2M"}]
    assert action["target"] == {"key": "SpotInstances", "value": target["name"]}
    assert template.inputs["stopConditions"] == [{"source": "none"}]
    # What `spotctl drill --cloud-run` finds it by: the stack's env and the pool it hits.
    assert template.inputs["tags"]["env"] == PROD.environment
    assert template.inputs["tags"][DRILL_TAG] == tags["karpenter.sh/nodepool"]
    parts = prod.children(prod.one("spot:aws:SpotDrill"))
    (role,) = [r for r in parts if r.type == "aws:iam/role:Role"]
    (policy,) = [r for r in parts if r.type == "aws:iam/rolePolicy:RolePolicy"]
    assert template in parts
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "fis.amazonaws.com"}]
    statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
    assert statements["ResolveTargets"]["Action"] == "ec2:DescribeInstances"
    interrupt = statements["InterruptThisPool"]
    assert interrupt["Action"] == "ec2:SendSpotInstanceInterruptions"
    assert interrupt["Condition"]["StringEquals"] == {
        f"aws:ResourceTag/{key}": value for key, value in tags.items()
    }
    # Opt-in: a stack without spot_drill has no template.
    assert stack_preview("dev").of_type("aws:fis/experimentTemplate:ExperimentTemplate") == []
