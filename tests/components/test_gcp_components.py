"""The GCP components, read from previews of the GCP stacks: secure defaults and wiring."""

from __future__ import annotations

import base64
import dataclasses
import json
import re

import pytest
from gcp_programs import tiny_program
from previewed import Preview
from stack_files import REPO_ROOT, stack_values

from components.catalog import catalog
from components.config import load_config
from components.config.gcp import ShutdownGrace
from components.gcp.buffer import GkeBufferPoolArgs, buffer_spec, set_size_body
from components.gcp.cluster import ClusterArgs
from components.gcp.computeclass import COMPUTE_CLASS_LABEL
from components.gcp.iam import (
    CHECKPOINT_PERMISSIONS,
    NodeServiceAccountArgs,
    TeamTrainingIdentityArgs,
    account_id,
    prefix_condition,
)
from components.gcp.kms import ServiceKeyArgs
from components.gcp.managed_prometheus import TrainingPodMonitoringArgs
from components.gcp.nodepools import GkeClassPoolArgs, GkeNodePoolArgs
from components.gcp.observability import ObservabilityArgs
from components.gcp.quotas import SpotGpuQuotasArgs, preemptible_gpu_quota_id
from components.gcp.services import ProjectServicesArgs
from components.gcp.storage import CheckpointBucketArgs
from components.pools import CAPACITY_TYPE_LABEL, GPU_CLASS_LABEL, POOL_LABEL, PoolSpec, class_pools
from spotctl.preview.gcp import project_number
from spotctl.preview.resources import PreviewError, preview_program

PROD = load_config(stack_values("gcp-prod"))
DEV = load_config(stack_values("gcp-dev"))
COST_KEYS = {"team", "env", "capacity-type"}


@pytest.fixture(scope="module")
def prod() -> Preview:
    return Preview("gcp-prod", preview_program(REPO_ROOT, "gcp-prod", strict_deprecations=True))


@pytest.fixture(scope="module")
def dev() -> Preview:
    return Preview("gcp-dev", preview_program(REPO_ROOT, "gcp-dev", strict_deprecations=True))


# --- network and cluster


def test_subnet_has_pod_and_service_ranges_and_nat_egress(prod: Preview):
    addresses = PROD.gcp.cluster.create.network
    vpc = prod.one("gcp:compute/network:Network")
    assert vpc.inputs["autoCreateSubnetworks"] is False
    subnet = prod.one("gcp:compute/subnetwork:Subnetwork")
    assert subnet.inputs["network"] == vpc.id
    assert subnet.inputs["ipCidrRange"] == addresses.nodes_cidr
    assert subnet.inputs["privateIpGoogleAccess"] is True
    assert {r["rangeName"]: r["ipCidrRange"] for r in subnet.inputs["secondaryIpRanges"]} == {
        "pods": addresses.pods_cidr,
        "services": addresses.services_cidr,
    }
    router = prod.one("gcp:compute/router:Router")
    nat = prod.one("gcp:compute/routerNat:RouterNat")
    assert nat.inputs["router"] == router.outputs["name"]
    assert nat.inputs["subnetworks"] == [
        {"name": subnet.id, "sourceIpRangesToNats": ["ALL_IP_RANGES"]}
    ]
    # Static egress addresses an SMTP relay can allowlist (auto-allocated ones change).
    # In the order of their names: the engine may register the two in either order.
    addresses = sorted(prod.of_type("gcp:compute/address:Address"), key=lambda a: a.name)
    assert len(addresses) == PROD.gcp.cluster.create.network.nat_addresses == 2
    assert nat.inputs["natIpAllocateOption"] == "MANUAL_ONLY"
    assert nat.inputs["natIps"] == [a.outputs["selfLink"] for a in addresses]
    assert {a.inputs["addressType"] for a in addresses} == {"EXTERNAL"}


def test_cluster_is_regional_private_and_runs_workload_identity_and_dataplane_v2(prod: Preview):
    create = PROD.gcp.cluster.create
    cluster = prod.one("gcp:container/cluster:Cluster")
    inputs = cluster.inputs
    assert inputs["location"] == PROD.region and inputs["nodeLocations"] == PROD.zones
    assert inputs["releaseChannel"] == {"channel": create.release_channel}
    assert inputs["minMasterVersion"] == create.version
    assert inputs["workloadIdentityConfig"] == {"workloadPool": "spot-training-prod.svc.id.goog"}
    assert inputs["datapathProvider"] == "ADVANCED_DATAPATH"
    assert inputs["removeDefaultNodePool"] is True
    assert inputs["ipAllocationPolicy"] == {
        "clusterSecondaryRangeName": "pods",
        "servicesSecondaryRangeName": "services",
    }
    assert inputs["privateClusterConfig"]["enablePrivateNodes"] is True
    # an authorized network is configured, so the public endpoint stays, limited to it
    assert inputs["privateClusterConfig"]["enablePrivateEndpoint"] is False
    assert inputs["masterAuthorizedNetworksConfig"] == {
        "cidrBlocks": [{"cidrBlock": "203.0.113.0/24", "displayName": "office"}],
        "gcpPublicCidrsAccessEnabled": False,
    }
    assert inputs["masterAuth"]["clientCertificateConfig"]["issueClientCertificate"] is False
    assert inputs["authenticatorGroupsConfig"] == {
        "securityGroup": "gke-security-groups@example.com"
    }
    assert set(inputs["resourceLabels"]) >= COST_KEYS
    # Secrets are encrypted with a rotating key the GKE service agent may use
    key = next(
        k
        for k in prod.of_type("gcp:kms/cryptoKey:CryptoKey")
        if k.id == inputs["databaseEncryption"]["keyName"]
    )
    assert key.inputs["rotationPeriod"] == "7776000s"
    agent = prod.one("gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember", "secrets-agent")
    number = project_number("spot-training-prod")
    assert agent.inputs["member"] == (
        f"serviceAccount:service-{number}@container-engine-robot.iam.gserviceaccount.com"
    )
    assert agent.urn in cluster.dependencies


def test_without_authorized_networks_the_endpoint_is_private_only(program_copy):
    values = stack_values("gcp-prod")
    del values["gcp"]["cluster"]["create"]["authorized_networks"]
    preview = Preview("p", preview_program(program_copy("p", values), "p"))
    cluster = preview.one("gcp:container/cluster:Cluster")
    assert cluster.inputs["privateClusterConfig"]["enablePrivateEndpoint"] is True
    assert cluster.inputs["masterAuthorizedNetworksConfig"]["cidrBlocks"] == []


def kubeconfig_of(preview: Preview) -> dict:
    return json.loads(preview.one("pulumi:providers:kubernetes").inputs["kubeconfig"])


@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_kubeconfig_authenticates_with_the_gke_plugin_and_stores_no_secret(stack, request):
    preview = request.getfixturevalue(stack)
    kubeconfig = kubeconfig_of(preview)
    (user,) = kubeconfig["users"]
    assert user["user"] == {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "gke-gcloud-auth-plugin",
            "installHint": "Install gke-gcloud-auth-plugin: gcloud components install "
            "gke-gcloud-auth-plugin",
            "provideClusterInfo": True,
        }
    }
    (cluster,) = kubeconfig["clusters"]
    config = PROD if stack == "prod" else DEV
    assert cluster["name"] == config.gcp.cluster.name
    assert cluster["cluster"]["server"].startswith("https://")


def test_attached_cluster_creates_no_cluster_or_network(dev: Preview):
    assert dev.of_type("gcp:container/cluster:Cluster") == []
    assert dev.of_type("gcp:compute/network:Network") == []
    pools = dev.of_type("gcp:container/nodePool:NodePool")
    assert len(pools) == 5  # stable, and spot and on-demand of l4-24gb's two machine types
    for pool in pools:
        assert pool.inputs["cluster"] == "shared-dev"
        assert pool.inputs["location"] == DEV.region


def test_attached_cluster_without_workload_identity_fails_the_preview(tmp_path):
    program = tiny_program(
        tmp_path,
        "from components.gcp.cluster import _require_pool\n"
        "_require_pool([], 'p.svc.id.goog', 'shared')\n",
    )
    with pytest.raises(PreviewError, match="gcp.cluster.existing: cluster 'shared' has no"):
        preview_program(program, "test")


def test_attached_cluster_without_groups_for_rbac_fails_a_stack_that_binds_groups(program_copy):
    """GKE matches RoleBindings to Google Groups only on a cluster with Google Groups for RBAC
    (GKE, "Configure Google Groups for RBAC"); the engine's cluster has none configured."""
    values = stack_values("gcp-dev")
    values["gcp"]["groups"]["team_engineers"] = {"vision": ["group:ml-vision@example.com"]}
    with pytest.raises(PreviewError, match="does not run Google Groups for RBAC"):
        preview_program(program_copy("gcp-dev", values), "gcp-dev")


# --- node pools


def test_stable_pool_is_on_demand_untainted_and_locked_down(prod: Preview):
    stable = PROD.gcp.stable_pool
    pool = prod.one("gcp:container/nodePool:NodePool", "stable")
    node = pool.inputs["nodeConfig"]
    nodes_account = prod.one("gcp:serviceaccount/account:Account", "nodes")
    assert pool.inputs["cluster"] == PROD.gcp.cluster.name
    assert pool.inputs["nodeLocations"] == PROD.zones
    assert pool.inputs["autoscaling"] == {
        "minNodeCount": stable.min_nodes_per_zone,
        "maxNodeCount": stable.max_nodes_per_zone,
        "locationPolicy": "BALANCED",
    }
    assert node["machineType"] == stable.machine_type and node["spot"] is False
    assert node["labels"] == {POOL_LABEL: "stable", CAPACITY_TYPE_LABEL: "on-demand"}
    assert node["taints"] == []
    assert "kubeletConfig" not in node  # GKE takes a shutdown grace on Spot pools only
    assert node["serviceAccount"] == nodes_account.outputs["email"]
    assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    assert node["shieldedInstanceConfig"] == {
        "enableSecureBoot": True,
        "enableIntegrityMonitoring": True,
    }
    assert node["resourceLabels"]["capacity-type"] == "on-demand"
    # not the default compute account, and nothing beyond what nodes need
    roles = {
        m.inputs["role"]
        for m in prod.of_type("gcp:projects/iAMMember:IAMMember")
        if m.inputs["member"] == nodes_account.outputs["member"]
    }
    # gcp-prod streams images: GKE asks a custom node account for Service Usage Consumer then.
    assert roles == {
        "roles/container.defaultNodeServiceAccount",
        "roles/artifactregistry.reader",
        "roles/serviceusage.serviceUsageConsumer",
    }


@pytest.mark.parametrize("capacity", ["spot", "on-demand"])
def test_class_pools_scale_from_zero_over_the_zones_that_offer_their_gpus(prod: Preview, capacity):
    h100 = next(c for c in PROD.gpu_classes if c.name == "h100-80gb")
    (pool,) = [
        p
        for p in prod.of_type("gcp:container/nodePool:NodePool")
        if p.inputs.get("name") == f"h100-80gb-{capacity}-a3-highgpu-8g"
    ]
    node = pool.inputs["nodeConfig"]
    assert pool.inputs["nodeLocations"] == h100.zones == ["us-central1-a", "us-central1-c"]
    limit = h100.spot_gpus if capacity == "spot" else h100.on_demand_gpus
    assert pool.inputs["autoscaling"] == {
        "totalMinNodeCount": 0,
        "totalMaxNodeCount": limit // 8,  # 8 H100s per a3-highgpu-8g
        "locationPolicy": "ANY",
    }
    assert node["machineType"] == "a3-highgpu-8g"
    assert node["spot"] is (capacity == "spot")
    assert node["guestAccelerators"] == [
        {
            "type": "nvidia-h100-80gb",
            "count": 8,
            "gpuDriverInstallationConfig": {"gpuDriverVersion": "DEFAULT"},
        }
    ]
    # The cloud-neutral labels, and the class's ComputeClass label and taint.
    assert node["labels"] == {
        POOL_LABEL: f"h100-80gb-{capacity}",
        CAPACITY_TYPE_LABEL: capacity,
        GPU_CLASS_LABEL: "h100-80gb",
        COMPUTE_CLASS_LABEL: "h100-80gb",
    }
    assert node["resourceLabels"]["capacity-type"] == capacity
    compute_class = {"key": COMPUTE_CLASS_LABEL, "value": "h100-80gb", "effect": "NO_SCHEDULE"}
    if capacity == "spot":
        assert node["taints"] == [
            {"key": "capacity-type", "value": "spot", "effect": "NO_SCHEDULE"},
            compute_class,
        ]
        shutdown = PROD.gcp.spot_shutdown
        assert node["kubeletConfig"] == {
            "shutdownGracePeriodSeconds": shutdown.seconds,
            "shutdownGracePeriodCriticalPodsSeconds": shutdown.critical_pods_seconds,
        }
    else:
        assert node["taints"] == [compute_class] and "kubeletConfig" not in node


def test_the_kubelet_shutdown_config_is_sent_only_where_it_differs_from_gkes(
    prod: Preview, dev: Preview
):
    """GKE's own grace (30 s, 15 of them for critical pods) needs no kubelet config, and a
    cluster before 1.35.0-gke.1171000 refuses any: gcp-dev, attached to such a cluster at GKE's
    default, sends none; gcp-prod, at 120 s, sends it."""
    for preview, config, sent in ((prod, PROD, True), (dev, DEV, False)):
        spot = [
            p.inputs["nodeConfig"]
            for p in preview.of_type("gcp:container/nodePool:NodePool")
            if p.inputs["nodeConfig"]["spot"]
        ]
        assert spot and config.gcp.spot_shutdown.is_gke_default is not sent
        assert all(("kubeletConfig" in node) is sent for node in spot), preview.stack


def test_every_machine_type_of_every_class_has_a_pool_per_capacity(prod: Preview):
    names = {p.inputs.get("name") for p in prod.of_type("gcp:container/nodePool:NodePool")}
    expected = {
        f"{c.name}-{capacity}-{machine}"
        for c in PROD.gpu_classes
        for capacity in ("spot", "on-demand")
        for machine in c.instance_types
    }
    assert expected <= names


def test_image_streaming_is_opt_in_per_stack(prod: Preview, dev: Preview):
    """GKE's image streaming requirements (cloud.google.com/kubernetes-engine/docs/how-to/
    image-streaming): GCFS on the pool's COS_CONTAINERD nodes, the Container File System API, and
    Service Usage Consumer for a node account other than the default."""
    assert PROD.gcp.image_streaming and not DEV.gcp.image_streaming
    for preview, streams in ((prod, True), (dev, False)):
        # The class pools and the buffer's GPU machines (gcp-prod's buffer is of class l4-24gb).
        class_pools_of = [
            p.inputs["nodeConfig"]
            for p in preview.of_type("gcp:container/nodePool:NodePool")
            if GPU_CLASS_LABEL in p.inputs["nodeConfig"]["labels"]
        ]
        assert class_pools_of
        for node in class_pools_of:
            assert node["imageType"] == "COS_CONTAINERD"
            assert ("gcfsConfig" in node) is streams
            if streams:
                assert node["gcfsConfig"] == {"enabled": True}
        apis = {s.inputs["service"] for s in preview.of_type("gcp:projects/service:Service")}
        assert ("containerfilesystem.googleapis.com" in apis) is streams
        roles = {m.inputs["role"] for m in preview.of_type("gcp:projects/iAMMember:IAMMember")}
        assert ("roles/serviceusage.serviceUsageConsumer" in roles) is streams


CLASS_POOL = dict(
    project="p", cluster="c", location="us-central1", service_account="n@p.iam.gserviceaccount.com"
)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"shutdown": None}, "a Spot pool needs it"),
        ({"machine": "g2-standard-8"}, "is not a type of class 'h100-80gb'"),
        ({"max_gpus": 4}, "4 GPUs cannot hold one a3-highgpu-8g"),
    ],
)
def test_class_pool_args_refuse_what_gke_cannot_build(change, message):
    machines = catalog("gcp").instance_types
    (pool,) = [p for p in class_pools(PROD) if p.name == "h100-80gb-spot"]
    if "max_gpus" in change:
        pool = dataclasses.replace(pool, max_gpus=change["max_gpus"])
    args = dict(
        CLASS_POOL,
        pool=pool,
        machine=machines[change.get("machine", "a3-highgpu-8g")],
        shutdown=change.get("shutdown", ShutdownGrace()),
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        GkeClassPoolArgs(**args)


# --- buffer pool and its schedule


def test_buffer_pool_is_on_demand_capacity_of_its_class_with_no_autoscaling(prod: Preview):
    buffer = PROD.gcp.buffer_pool
    pool = prod.one("gcp:container/nodePool:NodePool", "-buffer-")
    node = pool.inputs["nodeConfig"]
    assert pool.inputs["name"] == "buffer-g2-standard-48"
    assert pool.inputs["nodeLocations"] == buffer.zones == ["us-central1-a", "us-central1-b"]
    # The schedule sizes it, not the autoscaler, and `pulumi up` leaves its size alone.
    assert "autoscaling" not in pool.inputs and pool.inputs["nodeCount"] == 0
    assert pool.ignore_changes == ["nodeCount"]
    assert node["machineType"] == "g2-standard-48" and node["spot"] is False
    assert node["bootDisk"]["sizeGb"] == buffer.disk_size_gb
    # g2: L4 GPUs, so training of class l4-24gb runs on the buffer when it is free.
    assert node["guestAccelerators"][0]["type"] == "nvidia-l4"
    assert node["guestAccelerators"][0]["count"] == 4
    assert node["labels"] == {
        POOL_LABEL: "buffer",
        CAPACITY_TYPE_LABEL: "on-demand",
        GPU_CLASS_LABEL: "l4-24gb",
        COMPUTE_CLASS_LABEL: "l4-24gb",
    }
    assert node["taints"] == [
        {"key": COMPUTE_CLASS_LABEL, "value": "l4-24gb", "effect": "NO_SCHEDULE"}
    ]
    assert (
        node["serviceAccount"]
        == prod.one("gcp:serviceaccount/account:Account", "nodes").outputs["email"]
    )
    assert node["resourceLabels"]["capacity-type"] == "on-demand"


def test_each_action_is_a_scheduler_job_that_sets_the_pool_size(prod: Preview):
    pool = prod.one("gcp:container/nodePool:NodePool", "-buffer-")
    cluster = prod.one("gcp:container/cluster:Cluster")
    account = prod.one("gcp:serviceaccount/account:Account", "buffer-scheduler")
    url = (
        f"https://container.googleapis.com/v1/projects/{PROD.gcp.project}/locations/"
        f"{cluster.outputs['location']}/clusters/{cluster.outputs['name']}/nodePools/"
        f"{pool.outputs['name']}:setSize"
    )
    jobs = {j.inputs["name"]: j for j in prod.of_type("gcp:cloudscheduler/job:Job")}
    assert set(jobs) == {f"prod-buffer-{a.name}" for a in PROD.gcp.buffer_pool.schedule}
    for action in PROD.gcp.buffer_pool.schedule:
        job = jobs[f"prod-buffer-{action.name}"]
        assert job.inputs["schedule"] == action.recurrence
        assert job.inputs["timeZone"] == action.time_zone == "America/Chicago"
        assert job.inputs["region"] == PROD.region
        target = job.inputs["httpTarget"]
        assert target["uri"] == url and target["httpMethod"] == "POST"
        assert json.loads(base64.b64decode(target["body"])) == {"nodeCount": action.nodes_per_zone}
        assert target["headers"] == {"Content-Type": "application/json"}
        assert target["oauthToken"] == {
            "serviceAccountEmail": account.outputs["email"],
            "scope": "https://www.googleapis.com/auth/cloud-platform",
        }
        assert job.outputs["state"] == "ENABLED"
    assert {j.inputs["httpTarget"]["body"] for j in jobs.values()} == {
        set_size_body(1),
        set_size_body(2),
    }


def test_scheduler_account_may_only_resize_and_has_no_key(prod: Preview):
    account = prod.one("gcp:serviceaccount/account:Account", "buffer-scheduler")
    grants = [
        m
        for m in prod.of_type("gcp:projects/iAMMember:IAMMember")
        if m.inputs["member"] == account.outputs["member"]
    ]
    role = prod.one("gcp:projects/iAMCustomRole:IAMCustomRole", "buffer-resizer")
    assert [g.inputs["role"] for g in grants] == [role.outputs["name"]]
    assert role.inputs["permissions"] == ["container.clusters.update"]
    assert role.inputs["roleId"] == "spotTrainingBufferResizer_prod"
    # Each job is created once its account may resize, so its first run succeeds.
    (grant,) = grants
    for job in prod.of_type("gcp:cloudscheduler/job:Job"):
        assert grant.urn in job.dependencies


def test_without_a_buffer_there_is_no_pool_job_or_scheduler_account(dev: Preview):
    assert DEV.gcp.buffer_pool is None
    assert not dev.of_type("gcp:cloudscheduler/job:Job")
    assert not [p for p in dev.of_type("gcp:container/nodePool:NodePool") if "buffer" in p.name]
    assert not [r for r in dev.resources if "buffer" in r.name]


def test_a_cpu_buffer_joins_no_class():
    config = load_config(changed_buffer(machine_type="n2-standard-16"))
    machine = catalog("gcp").instance_types["n2-standard-16"]
    spec = buffer_spec(config.gcp.buffer_pool, machine)
    assert spec.gpu_class is None and spec.labels == {
        POOL_LABEL: "buffer",
        CAPACITY_TYPE_LABEL: "on-demand",
    }
    assert (spec.min_size, spec.max_size) == (0, 2)


def changed_buffer(**fields) -> dict:
    values = stack_values("gcp-prod")
    values["gcp"]["buffer_pool"].update(fields)
    return values


BUFFER = dict(
    project="p",
    region="us-central1",
    cluster="c",
    location="us-central1",
    zones=["us-central1-a"],
    node_service_account="n@p.iam.gserviceaccount.com",
    scheduler_account_id="prod-buffer-scheduler",
    resizer_role_id="spotTrainingBufferResizer_prod",
)


def _buffer_args(**changes) -> GkeBufferPoolArgs:
    machine = catalog("gcp").instance_types["g2-standard-48"]
    buffer = PROD.gcp.buffer_pool
    args = dict(
        BUFFER,
        spec=buffer_spec(buffer, machine),
        machine=machine,
        schedule=tuple(buffer.schedule),
    )
    return GkeBufferPoolArgs(**{**args, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schedule": ()}, "GkeBufferPoolArgs.schedule: at least one action"),
        (
            {"schedule": (PROD.gcp.buffer_pool.schedule[0],) * 2},
            "GkeBufferPoolArgs.schedule: action names repeat",
        ),
        ({"zones": []}, "GkeBufferPoolArgs.zones: at least one zone"),
        (
            {"machine": catalog("gcp").instance_types["n2-standard-16"]},
            "GkeBufferPoolArgs.spec: a buffer of the one machine type 'n2-standard-16'",
        ),
        ({"scheduler_account_id": "Buffer"}, "GkeBufferPoolArgs.scheduler_account_id: 'Buffer'"),
        ({"resizer_role_id": "buffer-resizer"}, "GkeBufferPoolArgs.resizer_role_id"),
    ],
)
def test_buffer_args_refuse_what_gke_cannot_build(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _buffer_args(**changes)


def test_a_gpu_buffer_must_carry_its_class():
    spec = dataclasses.replace(_buffer_args().spec, gpu_class=None)
    with pytest.raises(ValueError, match="a GPU buffer joins the class of its accelerator"):
        _buffer_args(spec=spec)


# --- checkpoint bucket


def test_bucket_is_versioned_private_soft_deleting_and_under_cmek(prod: Preview):
    storage = PROD.gcp.checkpoint_storage
    bucket = prod.one("gcp:storage/bucket:Bucket")
    inputs = bucket.inputs
    assert inputs["uniformBucketLevelAccess"] is True
    assert inputs["publicAccessPrevention"] == "enforced"
    assert inputs["versioning"] == {"enabled": True}
    assert inputs["forceDestroy"] is False
    assert inputs["location"] == PROD.region.upper()
    assert inputs["softDeletePolicy"] == {
        "retentionDurationSeconds": storage.soft_delete_days * 86400
    }
    assert set(inputs["labels"]) >= COST_KEYS
    key = prod.one("gcp:kms/cryptoKey:CryptoKey", "checkpoints")
    assert inputs["encryption"] == {"defaultKmsKeyName": key.id}
    assert key.inputs["rotationPeriod"] == f"{storage.key_rotation_days * 86400}s"
    agent = prod.one("gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember", "cmek-agent")
    number = project_number("spot-training-prod")
    assert agent.inputs["cryptoKeyId"] == key.id
    assert agent.inputs["role"] == "roles/cloudkms.cryptoKeyEncrypterDecrypter"
    assert agent.inputs["member"] == (
        f"serviceAccount:service-{number}@gs-project-accounts.iam.gserviceaccount.com"
    )
    assert agent.urn in bucket.dependencies  # the key is usable before the bucket needs it


def test_lifecycle_follows_config(prod: Preview, dev: Preview):
    storage = PROD.gcp.checkpoint_storage
    rules = prod.one("gcp:storage/bucket:Bucket").inputs["lifecycleRules"]
    assert rules == [
        {
            "action": {"type": "Delete"},
            "condition": {
                "withState": "ARCHIVED",
                "daysSinceNoncurrentTime": storage.noncurrent_version_days,
            },
        },
        {
            "action": {"type": "AbortIncompleteMultipartUpload"},
            "condition": {"age": storage.abort_multipart_days},
        },
        {
            "action": {"type": "Delete"},
            "condition": {
                "withState": "ARCHIVED",
                "numNewerVersions": storage.noncurrent_versions_to_keep,
            },
        },
    ]
    dev_rules = dev.one("gcp:storage/bucket:Bucket").inputs["lifecycleRules"]
    assert "numNewerVersions" not in json.dumps(dev_rules)


# --- identity


@pytest.mark.parametrize("team", PROD.teams, ids=lambda t: t.name)
def test_team_identity_is_bound_to_its_service_account_and_its_prefix(prod: Preview, team):
    account = prod.one("gcp:serviceaccount/account:Account", f"{team.name}-training")
    assert account.inputs["accountId"] == account_id("prod", team.name, "training")
    binding = prod.one("gcp:serviceaccount/iAMMember:IAMMember", f"{team.name}-training")
    assert binding.inputs["serviceAccountId"] == account.outputs["name"]
    assert binding.inputs["role"] == "roles/iam.workloadIdentityUser"
    assert binding.inputs["member"] == (
        f"serviceAccount:spot-training-prod.svc.id.goog[{team.namespace}/{team.service_account}]"
    )
    bucket = prod.one("gcp:storage/bucket:Bucket")
    access = prod.one("gcp:storage/bucketIAMMember:BucketIAMMember", f"{team.name}-training")
    role = prod.one("gcp:projects/iAMCustomRole:IAMCustomRole", "checkpoint-writer")
    assert access.inputs["bucket"] == bucket.outputs["name"]
    assert access.inputs["member"] == account.outputs["member"]
    assert access.inputs["role"] == role.outputs["name"]
    expression = access.inputs["condition"]["expression"]
    assert expression == prefix_condition(bucket.outputs["name"], team.checkpoint_prefix)
    assert f'/objects/{team.checkpoint_prefix}/")' in expression  # ends in '/'
    annotations = prod.one("kubernetes:core/v1:ServiceAccount", team.name).inputs["metadata"][
        "annotations"
    ]
    assert annotations == {"iam.gke.io/gcp-service-account": account.outputs["email"]}


def test_checkpoint_role_reaches_objects_only(prod: Preview):
    role = prod.one("gcp:projects/iAMCustomRole:IAMCustomRole", "checkpoint-writer")
    assert sorted(role.inputs["permissions"]) == sorted(CHECKPOINT_PERMISSIONS)
    assert all(
        p.startswith(("storage.objects.", "storage.multipartUploads."))
        for p in role.inputs["permissions"]
    )
    assert "storage.objects.setIamPolicy" not in role.inputs["permissions"]


def test_no_key_resources_anywhere(prod: Preview, dev: Preview):
    for preview in (prod, dev):
        types = {r.type for r in preview.resources}
        assert not types & {"gcp:serviceaccount/key:Key", "gcp:storage/hmacKey:HmacKey"}


def test_groups_are_separated_as_on_aws(prod: Preview):
    groups = PROD.gcp.groups
    project_roles: dict[str, set[str]] = {}
    for member in prod.of_type("gcp:projects/iAMMember:IAMMember"):
        project_roles.setdefault(member.inputs["member"], set()).add(member.inputs["role"])
    (admin,) = groups.platform_admin
    (engineer,) = groups.ml_engineer
    assert "roles/container.admin" in project_roles[admin]
    assert project_roles[engineer] == {
        "roles/container.clusterViewer",
        "roles/logging.viewer",
        "roles/monitoring.viewer",
    }
    for reader in groups.log_reader:
        assert project_roles[reader] == {"roles/container.clusterViewer", "roles/logging.viewer"}
    bucket_admins = [
        b.inputs["member"]
        for b in prod.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
        if b.inputs["role"] == "roles/storage.admin"
    ]
    assert bucket_admins == [admin]


def test_each_teams_engineers_edit_only_their_namespace_and_log_readers_view(prod: Preview):
    groups = PROD.gcp.groups
    bindings = prod.of_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
    by_namespace: dict[str, dict[str, list[str]]] = {}
    for binding in bindings:
        inputs = binding.inputs
        by_namespace.setdefault(inputs["metadata"]["namespace"], {})[inputs["roleRef"]["name"]] = [
            f"{s['kind']}:{s['name']}" for s in inputs["subjects"]
        ]
    readers = [f"Group:{m.removeprefix('group:')}" for m in groups.log_reader]
    assert by_namespace == {
        team.namespace: {
            "edit": [f"Group:{m.removeprefix('group:')}" for m in groups.team_engineers[team.name]],
            "view": readers,
        }
        for team in PROD.teams
    }
    # Team engineers may fetch the cluster's credentials; RBAC scopes them in it.
    viewers = {
        m.inputs["member"]
        for m in prod.of_type("gcp:projects/iAMMember:IAMMember")
        if m.inputs["role"] == "roles/container.clusterViewer"
    }
    assert {m for ms in groups.team_engineers.values() for m in ms} <= viewers


# --- quotas and observability


def test_spot_gpu_quota_preferences(prod: Preview, dev: Preview):
    preferences = [
        p
        for p in prod.of_type("gcp:cloudquota/sQuotaPreference:SQuotaPreference")
        if p.inputs["quotaId"].startswith("PREEMPTIBLE-")
    ]
    assert {
        p.inputs["quotaId"]: p.inputs["quotaConfig"]["preferredValue"] for p in preferences
    } == {
        preemptible_gpu_quota_id(accelerator): str(count)
        for accelerator, count in PROD.gcp.spot_gpu_quota.items()
    }
    assert preemptible_gpu_quota_id("nvidia-h100-80gb") == (
        "PREEMPTIBLE-NVIDIA-H100-GPUS-per-project-region"
    )
    for preference in preferences:
        assert preference.inputs["service"] == "compute.googleapis.com"
        assert preference.inputs["parent"] == "projects/spot-training-prod"
        assert preference.inputs["dimensions"] == {"region": PROD.region}
        assert preference.inputs["contactEmail"] == PROD.alerts.emails[0]
    assert dev.of_type("gcp:cloudquota/sQuotaPreference:SQuotaPreference") == []


def test_all_regions_gpu_and_cpu_quotas_cover_the_pools_at_their_maxima(prod: Preview):
    """New projects start with GPUS-ALL-REGIONS at 0 or 1 and CPUS-ALL-REGIONS below one
    a3-highgpu-8g (Compute Engine, "Allocation quotas"), whatever the regional Spot quotas say."""
    preferences = {
        p.inputs["quotaId"]: p
        for p in prod.of_type("gcp:cloudquota/sQuotaPreference:SQuotaPreference")
        if "ALL-REGIONS" in p.inputs["quotaId"]
    }
    # gcp-prod: L4 96 spot + 16 on-demand, H100 64 + 16, the buffer's two g2-standard-48 (four
    # L4s each) in two zones.
    gpus = 96 + 16 + 64 + 16 + 2 * 2 * 4
    # At the most vCPUs per GPU of each class (g2-standard-32: 32; a3-highgpu-8g: 208 / 8), the
    # stable pool's 2 n2-standard-8 in each of 3 zones, the buffer's 4 g2-standard-48.
    vcpus = (96 + 16) * 32 + (64 + 16) * 26 + 2 * 3 * 8 + 4 * 48
    assert {
        quota: int(p.inputs["quotaConfig"]["preferredValue"]) for quota, p in preferences.items()
    } == {
        "GPUS-ALL-REGIONS-per-project": gpus,
        "CPUS-ALL-REGIONS-per-project": vcpus,
    }
    for preference in preferences.values():
        assert "dimensions" not in preference.inputs, "project-wide: no region"
        assert preference.inputs["contactEmail"] == PROD.alerts.emails[0]


def test_preemptions_are_counted_from_the_audit_log(prod: Preview):
    metric = prod.one("gcp:logging/metric:Metric")
    assert 'protoPayload.methodName="compute.instances.preempted"' in metric.inputs["filter"]
    assert "cloudaudit.googleapis.com%2Fsystem_event" in metric.inputs["filter"]
    assert metric.inputs["metricDescriptor"]["metricKind"] == "DELTA"


def test_alerts_notify_by_email_and_link_their_runbook(prod: Preview):
    channels = prod.of_type("gcp:monitoring/notificationChannel:NotificationChannel")
    assert sorted(c.inputs["labels"]["email_address"] for c in channels) == sorted(
        PROD.alerts.emails
    )
    policies = prod.of_type("gcp:monitoring/alertPolicy:AlertPolicy")
    assert {p.name.rsplit("-", 1)[1] for p in policies} == {"SpotPreemptionsHigh", "GpuIdleHigh"}
    base = PROD.alerts.runbook_base_url
    metric = prod.one("gcp:logging/metric:Metric")
    for policy in policies:
        assert sorted(policy.inputs["notificationChannels"]) == sorted(
            c.outputs["name"] for c in channels
        )
        alert = policy.name.rsplit("-", 1)[1]
        runbook = policy.inputs["documentation"]["links"][0]["url"]
        assert runbook == f"{base}/runbooks/gcp/{alert}.md"
        assert runbook in policy.inputs["documentation"]["content"]
        assert (REPO_ROOT / runbook.removeprefix(f"{base}/")).is_file(), runbook
    (preemptions,) = [p for p in policies if p.name.endswith("SpotPreemptionsHigh")]
    threshold = preemptions.inputs["conditions"][0]["conditionThreshold"]
    assert metric.outputs["name"] in threshold["filter"]
    # COMPARISON_GT on a whole hourly count: above N - 1 pages at N.
    assert threshold["thresholdValue"] == PROD.gcp.alarms.preemptions_per_hour - 1


def test_dashboard_shows_preemptions_pool_sizes_gpu_use_and_checkpoint_age(prod: Preview):
    body = json.loads(prod.one("gcp:monitoring/dashboard:Dashboard").inputs["dashboardJson"])
    titles = " | ".join(t["widget"]["title"] for t in body["mosaicLayout"]["tiles"])
    for wanted in ("preemptions", "Pool sizes", "GPU utilisation", "Checkpoint age"):
        assert wanted in titles
    assert "spotsafe_checkpoint_age_seconds" in json.dumps(body)
    assert f'"{PROD.gcp.cluster.name}\\"' in json.dumps(body)
    # GKE's DCGM metrics land in Managed Service for Prometheus, labelled with the cluster.
    queries = [
        t["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]
        for t in body["mosaicLayout"]["tiles"]
    ]
    series = f'DCGM_FI_DEV_GPU_UTIL{{cluster="{PROD.gcp.cluster.name}"}}'
    assert {"prometheusQuery": f"count({series} < 5) / count({series})"} in queries


# --- the platform handed to the Kubernetes layer


def test_platform_notice_budget_follows_the_shutdown_grace(prod: Preview, dev: Preview):
    for preview, config in ((prod, PROD), (dev, DEV)):
        budget = config.gcp.spot_shutdown.user_pods_seconds
        templates = json.dumps(
            [r.inputs for r in preview.resources if r.type == "kubernetes:core/v1:ConfigMap"]
        )
        assert f"terminationGracePeriodSeconds: {budget}\\n" in templates
        assert "value: sigterm,gce" in templates
        assert "gs://" in templates
    assert (
        PROD.gcp.spot_shutdown.user_pods_seconds,
        DEV.gcp.spot_shutdown.user_pods_seconds,
    ) == (105, 15)


# --- validation at construction


def _spec(**changes) -> PoolSpec:
    base = {
        "tier": "stable",
        "instance_types": ("n2-standard-8",),
        "architecture": "x86_64",
        "gpus": False,
        "min_size": 1,
        "max_size": 3,
        "desired_size": 1,
        "disk_size_gib": 100,
    }
    return PoolSpec(**{**base, **changes})


POOL = {
    "project": "p",
    "cluster": "c",
    "location": "us-central1",
    "zones": ["us-central1-a"],
    "service_account": "n@p.iam.gserviceaccount.com",
}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: ClusterArgs(
                project="p",
                region="us-central1",
                zones=["us-east1-b"],
                node_service_account="n",
                create=PROD.gcp.cluster.create,
            ),
            "ClusterArgs.zones: ['us-east1-b'] must be one or more zones of us-central1",
        ),
        (
            lambda: ClusterArgs(
                project="p", region="us-central1", zones=[], node_service_account="n"
            ),
            "ClusterArgs: set exactly one of 'create' or 'existing'",
        ),
        (
            lambda: GkeNodePoolArgs(spec=_spec(instance_types=("a", "b")), **POOL),
            "GkeNodePoolArgs.spec.instance_types: a GKE node pool has exactly one machine type",
        ),
        (
            lambda: CheckpointBucketArgs(project="p", location="us", bucket_name="google-ckpt"),
            "CheckpointBucketArgs.bucket_name: a GCS bucket name must not start with 'goog'",
        ),
        (
            lambda: CheckpointBucketArgs(project="p", location="us", soft_delete_days=3),
            "CheckpointBucketArgs.soft_delete_days: between 7 and 90",
        ),
        (
            lambda: ServiceKeyArgs(project="p", location="us", agent_member="m", rotation_days=0),
            "ServiceKeyArgs.rotation_days: between 1 and 365",
        ),
        (
            lambda: TeamTrainingIdentityArgs(
                project="p",
                account_id="prod-vision-training",
                workload_pool="p.svc.id.goog",
                namespace="team-vision",
                service_account="training",
                bucket="b",
                prefix="teams/*",
                role="r",
            ),
            "TeamTrainingIdentityArgs.prefix: 'teams/*' must be a non-empty object prefix",
        ),
        (
            lambda: NodeServiceAccountArgs(project="p", account_id="Nodes"),
            "NodeServiceAccountArgs.account_id: 'Nodes' is not a service account id",
        ),
        (
            lambda: SpotGpuQuotasArgs(project="p", region="r", gpus={"nvidia-a10g": 4}),
            "SpotGpuQuotasArgs.gpus: unknown accelerator type 'nvidia-a10g'",
        ),
        (
            lambda: SpotGpuQuotasArgs(project="p", region="r", gpus={"nvidia-l4": 4}),
            "SpotGpuQuotasArgs.contact_email: Google asks someone about a quota increase",
        ),
        (
            lambda: ObservabilityArgs(
                project="p", cluster_name="c", runbook_base_url="u", gpu_idle_percent=0
            ),
            "ObservabilityArgs.gpu_idle_percent: between 1 and 99",
        ),
        (
            lambda: ObservabilityArgs(
                project="p", cluster_name="c", runbook_base_url="u", gpu_idle_percent=100
            ),
            "ObservabilityArgs.gpu_idle_percent: between 1 and 99",
        ),
        (
            lambda: SpotGpuQuotasArgs(
                project="p", region="r", all_regions={"GPUS-per-project": 8}, contact_email="e"
            ),
            "SpotGpuQuotasArgs.all_regions['GPUS-per-project']: 8 is not a positive value of "
            "GPUS-ALL-REGIONS-per-project or CPUS-ALL-REGIONS-per-project",
        ),
        (
            lambda: ProjectServicesArgs(project="p", services=["container"]),
            "ProjectServicesArgs.services: ['container'] are not Google API names",
        ),
        (
            lambda: TrainingPodMonitoringArgs(local_ranks=16),
            "TrainingPodMonitoringArgs.local_ranks: 16 metrics ports; a ClusterPodMonitoring "
            "scrapes 1-10",
        ),
    ],
)
def test_bad_args_are_refused_at_construction(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


def test_long_service_account_ids_keep_a_hash():
    long_id = account_id("production", "computer-vision-research", "training")
    assert len(long_id) == 30 and long_id.startswith("production-computer")
    assert long_id != account_id("production", "computer-vision-robotics", "training")
    assert account_id("prod", "vision", "training") == "prod-vision-training"
