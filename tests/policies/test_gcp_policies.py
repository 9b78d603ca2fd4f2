"""GCP policies: compliant, violating and missing-property cases, on inputs shaped as the engine
sends them."""

from __future__ import annotations

import pytest
from spot_policy_cases import TAGS, resource

BUCKET = "gcp:storage/bucket:Bucket"
KEY = "gcp:kms/cryptoKey:CryptoKey"
NODE_POOL = "gcp:container/nodePool:NodePool"
DAY = 86400


def bucket(**inputs):
    return resource(BUCKET, "ckpt", inputs)


@pytest.mark.parametrize(
    ("case", "inputs", "violates"),
    [
        ("compliant", {"publicAccessPrevention": "enforced"}, False),
        ("violating: inherited", {"publicAccessPrevention": "inherited"}, True),
        ("missing", {}, True),
    ],
)
def test_public_access_prevented(violations, case, inputs, violates):
    found = violations("gcs-bucket-public-access-prevented", bucket(**inputs))
    assert found == (
        ["GCS bucket 'ckpt' does not set publicAccessPrevention: enforced"] if violates else []
    ), case


@pytest.mark.parametrize(
    ("case", "seconds", "expected"),
    [
        ("compliant", 14 * DAY, []),
        ("violating: too short", 3 * DAY, ["keeps deleted objects 3 days"]),
        ("missing", None, ["keeps deleted objects 0 days"]),
    ],
)
def test_soft_delete(violations, case, seconds, expected):
    policy = {} if seconds is None else {"retentionDurationSeconds": seconds}
    found = violations("gcs-bucket-soft-delete", bucket(softDeletePolicy=policy))
    assert len(found) == len(expected) and all(
        e in m for e, m in zip(expected, found, strict=True)
    ), case


def keyed_bucket(key, encryption=True):
    inputs = {"encryption": {"defaultKmsKeyName": "projects/p/keyRings/r/cryptoKeys/k"}}
    return resource(BUCKET, "ckpt", inputs if encryption else {}, deps=[key])


@pytest.mark.parametrize(
    ("case", "rotation", "encryption", "violates"),
    [
        ("compliant", "7776000s", True, False),
        ("violating: key never rotates", None, True, True),
        ("violating: rotates too rarely", f"{400 * DAY}s", True, True),
        ("missing: no encryption", "7776000s", False, True),
    ],
)
def test_bucket_cmek(violations, case, rotation, encryption, violates):
    key = resource(KEY, "key", {} if rotation is None else {"rotationPeriod": rotation})
    found = violations("gcs-bucket-cmek", key, keyed_bucket(key, encryption))
    assert bool(found) == violates, case


def test_bucket_cmek_needs_a_key_of_the_stack(violations):
    outside = resource(BUCKET, "ckpt", {"encryption": {"defaultKmsKeyName": "projects/x/k"}})
    assert violations("gcs-bucket-cmek", outside) == [
        "GCS bucket 'ckpt' is not encrypted (encryption.defaultKmsKeyName) with a KMS key of "
        "this stack that rotates within 365 days"
    ]


@pytest.mark.parametrize(
    ("case", "inputs", "expected"),
    [
        ("compliant", {"rotationPeriod": "7776000s"}, []),
        (
            "violating",
            {"rotationPeriod": f"{730 * DAY}s"},
            ["KMS crypto key 'key' rotates every 730 days; set rotationPeriod to at most 365 days"],
        ),
        (
            "missing",
            {},
            ["KMS crypto key 'key' does not rotate; set rotationPeriod to at most 365 days"],
        ),
    ],
)
def test_key_rotation(violations, case, inputs, expected):
    assert violations("gcp-kms-key-rotation", resource(KEY, "key", inputs)) == expected, case


@pytest.mark.parametrize(
    ("case", "type_", "inputs", "violates"),
    [
        ("compliant: an account, no key", "gcp:serviceaccount/account:Account", {}, False),
        (
            "violating: a key",
            "gcp:serviceaccount/key:Key",
            {"serviceAccountId": "projects/p/serviceAccounts/a@p.iam.gserviceaccount.com"},
            True,
        ),
        ("violating: an HMAC key", "gcp:storage/hmacKey:HmacKey", {}, True),
        ("missing: a key with no inputs is still a key", "gcp:serviceaccount/key:Key", {}, True),
    ],
)
def test_no_service_account_keys(violations, case, type_, inputs, violates):
    assert bool(violations("gcp-no-service-account-keys", resource(type_, "k", inputs))) == (
        violates
    ), case


GRANT = "gcp:storage/bucketIAMMember:BucketIAMMember"
SCOPED = (
    'resource.name.startsWith("projects/_/buckets/ckpt/objects/teams/vision/") || '
    '(resource.type == "storage.googleapis.com/Bucket" && '
    'api.getAttribute("storage.googleapis.com/objectListPrefix", "").startsWith("teams/vision/"))'
)
WORKLOAD = "serviceAccount:prod-vision-training@p.iam.gserviceaccount.com"


@pytest.mark.parametrize(
    ("case", "inputs", "violates"),
    [
        ("compliant: scoped", {"member": WORKLOAD, "condition": {"expression": SCOPED}}, False),
        ("compliant: a group, not a workload", {"member": "group:admins@example.com"}, False),
        (
            "violating: a prefix without its '/'",
            {
                "member": WORKLOAD,
                "condition": {
                    "expression": 'resource.name.startsWith("projects/_/buckets/ckpt/objects/t")'
                },
            },
            True,
        ),
        (
            "violating: a binding of several workloads",
            {"members": [WORKLOAD], "condition": {"expression": "true"}},
            True,
        ),
        ("missing: no condition", {"member": WORKLOAD}, True),
    ],
)
def test_workload_bucket_grants_are_prefix_scoped(violations, case, inputs, violates):
    type_ = GRANT if "member" in inputs else "gcp:storage/bucketIAMBinding:BucketIAMBinding"
    found = violations("gcs-workload-prefix-scoped", resource(type_, "grant", inputs))
    assert bool(found) == violates, (case, found)


SPOT_CONFIG = {
    "spot": True,
    "taints": [{"key": "capacity-type", "value": "spot", "effect": "NO_SCHEDULE"}],
}


@pytest.mark.parametrize(
    ("case", "kubelet", "expected"),
    [
        ("compliant: extended", {"shutdownGracePeriodSeconds": 120}, []),
        (
            "compliant: with critical pods",
            {"shutdownGracePeriodSeconds": 30, "shutdownGracePeriodCriticalPodsSeconds": 15},
            [],
        ),
        (
            "violating: above 120 s",
            {"shutdownGracePeriodSeconds": 180},
            ["asks for 180 s of shutdown grace; GKE honours at most 120 s"],
        ),
        (
            "violating: nothing left for training",
            {"shutdownGracePeriodSeconds": 30, "shutdownGracePeriodCriticalPodsSeconds": 30},
            ["gives critical pods 30 of its 30 s shutdown grace"],
        ),
        ("missing: GKE's default 30 s", None, []),
    ],
)
def test_spot_pool_shutdown_grace(violations, case, kubelet, expected):
    config = SPOT_CONFIG if kubelet is None else {**SPOT_CONFIG, "kubeletConfig": kubelet}
    found = violations(
        "gke-spot-pool-shutdown-grace", resource(NODE_POOL, "gpu", {"nodeConfig": config})
    )
    assert len(found) == len(expected) and all(
        e in m for e, m in zip(expected, found, strict=True)
    ), case


BUFFER_CONFIG = {"machineType": "g2-standard-48", "labels": {"node-pool": "buffer"}}


@pytest.mark.parametrize(
    ("case", "inputs", "expected"),
    [
        ("compliant: on-demand, fixed", {"nodeConfig": BUFFER_CONFIG, "nodeCount": 0}, []),
        (
            "violating: spot",
            {"nodeConfig": {**BUFFER_CONFIG, "spot": True}},
            ["runs spot or preemptible nodes"],
        ),
        (
            "violating: autoscaling",
            {"nodeConfig": BUFFER_CONFIG, "autoscaling": {"totalMaxNodeCount": 4}},
            ["has autoscaling"],
        ),
        (
            "violating: both",
            {
                "nodeConfig": {**BUFFER_CONFIG, "preemptible": True},
                "autoscaling": {"maxNodeCount": 2},
            },
            ["runs spot or preemptible nodes", "has autoscaling"],
        ),
        ("missing: no node config, so no buffer label", {"autoscaling": {"maxNodeCount": 2}}, []),
        (
            "not the buffer: a spot class pool scales",
            {
                "nodeConfig": {"spot": True, "labels": {"node-pool": "l4-24gb-spot"}},
                "autoscaling": {"totalMaxNodeCount": 4},
            },
            [],
        ),
    ],
)
def test_buffer_pool_is_on_demand_and_fixed(violations, case, inputs, expected):
    found = violations("gke-buffer-pool-on-demand-fixed", resource(NODE_POOL, "buffer", inputs))
    assert len(found) == len(expected) and all(
        e in m for e, m in zip(expected, found, strict=True)
    ), case


def test_shutdown_grace_is_not_a_concern_of_on_demand_pools(violations):
    pool = resource(
        NODE_POOL, "stable", {"nodeConfig": {"kubeletConfig": {"shutdownGracePeriodSeconds": 900}}}
    )
    assert violations("gke-spot-pool-shutdown-grace", pool) == []


@pytest.mark.parametrize(
    ("case", "type_", "inputs", "expected"),
    [
        ("compliant: labels", BUCKET, {"labels": TAGS}, []),
        (
            "compliant: cluster resourceLabels",
            "gcp:container/cluster:Cluster",
            {"resourceLabels": TAGS},
            [],
        ),
        ("compliant: node pool VMs", NODE_POOL, {"nodeConfig": {"resourceLabels": TAGS}}, []),
        (
            "violating: alert policy without team",
            "gcp:monitoring/alertPolicy:AlertPolicy",
            {"userLabels": {"env": "prod", "capacity-type": "none"}},
            ["team"],
        ),
        ("missing: no labels", KEY, {}, ["team, env, capacity-type"]),
        ("missing: node pool", NODE_POOL, {"nodeConfig": {}}, ["team, env, capacity-type"]),
        ("not labelled", "gcp:compute/router:Router", {}, []),
    ],
)
def test_cost_labels(violations, case, type_, inputs, expected):
    found = violations("gcp-cost-labels-present", resource(type_, "r", inputs))
    assert [m.split(": ")[-1] for m in found] == expected, case


def test_cost_labels_from_the_providers_default_labels(violations):
    provider = resource("pulumi:providers:gcp", "gcp", {"project": "p", "defaultLabels": TAGS})
    key = resource(KEY, "k", {}, provider=f"{provider.urn}::id")
    policy = resource(
        "gcp:monitoring/alertPolicy:AlertPolicy", "a", {}, provider=f"{provider.urn}::id"
    )
    # defaultLabels reach `labels`, never Cloud Monitoring's userLabels
    assert violations("gcp-cost-labels-present", provider, key, policy) == [
        "'a' is missing cost label(s): team, env, capacity-type"
    ]


@pytest.mark.parametrize(
    ("case", "threshold", "expected"),
    [
        ("compliant", {"comparison": "COMPARISON_GT", "thresholdValue": 19}, []),
        (
            "violating: GE, which the Monitoring API refuses for a metric threshold",
            {"comparison": "COMPARISON_GE", "thresholdValue": 20},
            [
                "'alerts' conditions[0].conditionThreshold.comparison is COMPARISON_GE; the "
                "Monitoring API accepts only COMPARISON_GT or COMPARISON_LT for a metric threshold"
            ],
        ),
        (
            "missing",
            {"thresholdValue": 20},
            [
                "'alerts' conditions[0].conditionThreshold.comparison is not set; the Monitoring "
                "API accepts only COMPARISON_GT or COMPARISON_LT for a metric threshold"
            ],
        ),
    ],
)
def test_alert_threshold_comparison(violations, case, threshold, expected):
    policy = resource(
        "gcp:monitoring/alertPolicy:AlertPolicy",
        "alerts",
        {"conditions": [{"conditionThreshold": threshold}]},
    )
    assert violations("monitoring-threshold-comparison", policy) == expected, case


CLUSTER = "gcp:container/cluster:Cluster"
WI_MEMBER = "serviceAccount:spot-training-prod.svc.id.goog[team-vision/training]"


def _pool_case(case: str) -> list:
    cluster = resource(
        CLUSTER, "gke", {"workloadIdentityConfig": {"workloadPool": "p.svc.id.goog"}}
    )
    account = resource("gcp:serviceaccount/account:Account", "vision", {"accountId": "vision"})
    deps = {"compliant": [account, cluster], "violating": [account], "missing": [account]}[case]
    binding = resource(
        "gcp:serviceaccount/iAMMember:IAMMember",
        "vision-workload-identity",
        {"role": "roles/iam.workloadIdentityUser", "member": WI_MEMBER},
        deps=deps,
    )
    # "missing": an attached cluster, none in the stack: its pool exists already.
    return [account, binding] if case == "missing" else [cluster, account, binding]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("compliant", []),
        (
            "violating",
            [
                "'vision-workload-identity' member names a Workload Identity pool but does not "
                "wait for cluster 'gke', which creates it: the first `pulumi up` fails with "
                "'Identity Pool does not exist'"
            ],
        ),
        ("missing", []),
    ],
)
def test_workload_pool_after_cluster(violations, case, expected):
    found = violations("gke-workload-pool-after-cluster", *_pool_case(case))
    assert found == expected, case
