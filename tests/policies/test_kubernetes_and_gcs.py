"""Kubernetes (PriorityClass, spot Jobs) and GCS policies: compliant, violating, missing cases."""

from __future__ import annotations

import pytest
from spot_policy_cases import PACK_DIR, resource

from spotctl.preview.analyzer import PolicyAnalyzer

PRIORITY = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
JOB = "kubernetes:batch/v1:Job"
GCS = "gcp:storage/bucket:Bucket"
SPOT_TOLERATION = {
    "key": "capacity-type",
    "operator": "Equal",
    "value": "spot",
    "effect": "NoSchedule",
}
IGNORE_DISRUPTION = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}


def priority(name, value, **extra):
    return resource(PRIORITY, name, {"metadata": {"name": name}, "value": value, **extra})


def job(pod=None, rules=(IGNORE_DISRUPTION,), tolerations=(SPOT_TOLERATION,)):
    pod_spec = {"tolerations": list(tolerations), **(pod or {})}
    spec = {"template": {"spec": pod_spec}}
    if rules is not None:
        spec["podFailurePolicy"] = {"rules": list(rules)}
    return resource(JOB, "train", {"metadata": {"name": "train"}, "spec": spec})


@pytest.mark.parametrize(
    ("case", "classes", "expected"),
    [
        (
            "compliant",
            [priority("services-critical", 1000000), priority("training-standard", 1000)],
            [],
        ),
        (
            "violating: training outranks",
            [priority("services-critical", 1000), priority("training-standard", 1000)],
            ["does not outrank training-standard"],
        ),
        (
            "violating: may not preempt",
            [
                priority("services-critical", 1000000, preemptionPolicy="Never"),
                priority("training", 1),
            ],
            ["preemptionPolicy Never"],
        ),
        (
            "missing: no value",
            [priority("services-critical", None), priority("training", 1)],
            ["does not outrank"],
        ),
    ],
)
def test_services_priority_not_preemptible(violations, case, classes, expected):
    found = violations("k8s-services-priority-not-preemptible", *classes)
    assert len(found) == len(expected) and all(
        e in m for e, m in zip(expected, found, strict=True)
    ), case


def test_services_class_pattern_is_configurable():
    config = {"k8s-services-priority-not-preemptible": {"servicesClassPattern": "^platform-"}}
    classes = [priority("platform-critical", 10), priority("training", 100)]
    with PolicyAnalyzer(PACK_DIR, project="p", stack="s", policy_config=config) as pack:
        report = pack.analyze(classes)
    assert [v.policy for v in report.violations] == ["k8s-services-priority-not-preemptible"]


@pytest.mark.parametrize(
    ("case", "resource_", "violates"),
    [
        ("compliant", job(), False),
        (
            "violating: disruption counted",
            job(rules=[{**IGNORE_DISRUPTION, "action": "Count"}]),
            True,
        ),
        (
            "violating: exit code only",
            job(rules=[{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [75]}}]),
            True,
        ),
        ("missing: no podFailurePolicy", job(rules=None), True),
        ("not on spot", job(rules=None, tolerations=()), False),
        ("tolerates everything", job(rules=None, tolerations=[{"operator": "Exists"}]), True),
    ],
)
def test_spot_job_ignores_disruption(violations, case, resource_, violates):
    found = violations("k8s-spot-job-ignores-disruption", resource_)
    assert bool(found) == violates, case


def test_spot_cronjob_and_jobset_are_checked_too(violations):
    job_spec = {"template": {"spec": {"tolerations": [SPOT_TOLERATION]}}}
    cron = resource(
        "kubernetes:batch/v1:CronJob", "nightly", {"spec": {"jobTemplate": {"spec": job_spec}}}
    )
    jobset = resource(
        "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet",
        "multi",
        {"spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": job_spec}}]}},
    )
    assert len(violations("k8s-spot-job-ignores-disruption", cron, jobset)) == 2


@pytest.mark.parametrize(
    ("case", "grace", "violates"),
    [("compliant", 120, False), ("violating", 60, True), ("missing: default 30 s", None, True)],
)
def test_spot_job_grace_period(violations, case, grace, violates):
    pod = {} if grace is None else {"terminationGracePeriodSeconds": grace}
    found = violations("k8s-spot-job-grace-period", job(pod=pod))
    assert bool(found) == violates, case
    if violates:
        assert (
            f"terminationGracePeriodSeconds {grace or 30}, below the 120 s notice budget"
            in found[0]
        )


GOOD_GCS = {
    "uniformBucketLevelAccess": True,
    "versioning": {"enabled": True},
    "lifecycleRules": [
        {"action": {"type": "Delete"}, "condition": {"daysSinceNoncurrentTime": 14}},
        {"action": {"type": "AbortIncompleteMultipartUpload"}, "condition": {"age": 2}},
    ],
}


@pytest.mark.parametrize(
    ("policy", "violating", "missing"),
    [
        (
            "gcs-bucket-uniform-access",
            {"uniformBucketLevelAccess": False},
            "uniformBucketLevelAccess",
        ),
        ("gcs-bucket-versioning-enabled", {"versioning": {"enabled": False}}, "versioning"),
        (
            "gcs-bucket-lifecycle",
            {
                "lifecycleRules": [
                    {"action": {"type": "Delete"}, "condition": {"daysSinceNoncurrentTime": 400}}
                ]
            },
            "lifecycleRules",
        ),
    ],
)
def test_gcs_bucket(violations, policy, violating, missing):
    assert violations(policy, resource(GCS, "ckpt", GOOD_GCS)) == []
    assert violations(policy, resource(GCS, "ckpt", {**GOOD_GCS, **violating}))
    without = {k: v for k, v in GOOD_GCS.items() if k != missing}
    assert violations(policy, resource(GCS, "ckpt", without))


KARPENTER = "kubernetes:karpenter.sh/v1:NodePool"
SPOT_REQUIREMENTS = [
    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
    {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": ["g5.12xlarge", "g6.12xlarge", "g6e.12xlarge"],
    },
]


def node_pool(
    requirements=SPOT_REQUIREMENTS,
    taints=({"key": "capacity-type", "value": "spot", "effect": "NoSchedule"},),
):
    template = {"requirements": list(requirements)}
    if taints is not None:
        template["taints"] = list(taints)
    return resource(KARPENTER, "gpu-spot", {"spec": {"template": {"spec": template}}})


@pytest.mark.parametrize(
    ("case", "pool", "violates"),
    [
        ("compliant", node_pool(), False),
        (
            "violating: soft taint",
            node_pool(taints=[{"key": "k", "effect": "PreferNoSchedule"}]),
            True,
        ),
        ("missing: no taints", node_pool(taints=None), True),
        ("on-demand needs none", node_pool(requirements=SPOT_REQUIREMENTS[1:], taints=None), False),
    ],
)
def test_karpenter_spot_pool_tainted(violations, case, pool, violates):
    assert bool(violations("karpenter-spot-pool-tainted", pool)) == violates, case


@pytest.mark.parametrize(
    ("case", "extra", "expected"),
    [
        ("compliant", [], []),
        (
            "violating: one zone",
            [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]}],
            ["allows 1 zone(s)"],
        ),
        ("missing: no instance-type requirement leaves every type", None, []),
    ],
)
def test_karpenter_spot_pool_diversified(violations, case, extra, expected):
    requirements = SPOT_REQUIREMENTS[:1] if extra is None else [*SPOT_REQUIREMENTS, *extra]
    found = violations("karpenter-spot-pool-diversified", node_pool(requirements=requirements))
    assert len(found) == len(expected), case
    assert all(e in m for e, m in zip(expected, found, strict=True)), case


def test_karpenter_pool_with_two_instance_types_is_reported(violations):
    narrow = [
        SPOT_REQUIREMENTS[0],
        {**SPOT_REQUIREMENTS[1], "values": ["g5.12xlarge", "g6.12xlarge"]},
    ]
    assert violations("karpenter-spot-pool-diversified", node_pool(requirements=narrow)) == [
        "Karpenter NodePool 'gpu-spot' allows 2 instance type(s); diversify over at least 3"
    ]


GPU_REQUIREMENTS = [
    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
    {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": ["g6e.12xlarge", "g6e.24xlarge", "g6e.48xlarge"],
    },
    {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["l40s"]},
]


def gpu_pool(requirements=GPU_REQUIREMENTS, limits=(("nvidia.com/gpu", "64"),)):
    spec = {"template": {"spec": {"requirements": list(requirements)}}}
    if limits is not None:
        spec["limits"] = dict(limits)
    return resource(KARPENTER, "l40s-spot", {"spec": spec})


@pytest.mark.parametrize(
    ("case", "pool", "expected"),
    [
        ("compliant", gpu_pool(), []),
        (
            "violating: two models by name",
            gpu_pool([*GPU_REQUIREMENTS[:2], {**GPU_REQUIREMENTS[2], "values": ["l40s", "a10g"]}]),
            ["without pinning one model"],
        ),
        (
            "violating: types of two accelerators",
            gpu_pool(
                [
                    GPU_REQUIREMENTS[0],
                    {**GPU_REQUIREMENTS[1], "values": ["g6e.48xlarge", "p5.48xlarge"]},
                    GPU_REQUIREMENTS[2],
                ]
            ),
            ["lists instance types of 2 accelerators: h100 80 GB, l40s 48 GB"],
        ),
        (
            "missing: GPU types with no model requirement",
            gpu_pool(GPU_REQUIREMENTS[:2]),
            ["without pinning one model"],
        ),
        (
            "a CPU pool is not concerned",
            gpu_pool(
                [
                    {
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["m6i.large"],
                    }
                ]
            ),
            [],
        ),
    ],
)
def test_karpenter_gpu_pool_one_accelerator(violations, case, pool, expected):
    found = violations("karpenter-gpu-pool-one-accelerator", pool)
    assert len(found) == len(expected) and all(
        e in m for e, m in zip(expected, found, strict=True)
    ), (case, found)


@pytest.mark.parametrize(
    ("case", "pool", "violates"),
    [
        ("compliant", gpu_pool(), False),
        ("violating: a CPU limit only", gpu_pool(limits=(("cpu", "1000"),)), True),
        ("missing: no limits", gpu_pool(limits=None), True),
    ],
)
def test_karpenter_gpu_pool_limited(violations, case, pool, violates):
    assert bool(violations("karpenter-gpu-pool-limited", pool)) == violates, case
