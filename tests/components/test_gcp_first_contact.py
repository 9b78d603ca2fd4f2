"""One `pulumi up` on an empty GCP project, read from the GCP stacks' previews: what needs the
Workload Identity pool waits for the cluster that creates it, every resource and lookup waits for
the APIs it calls, alert policies compare the way the Monitoring API accepts and wait for their
log-based metric.

Sources: GKE, "Authenticate to Google Cloud APIs from GKE workloads" (the pool
`PROJECT_ID.svc.id.goog` is created with the first Workload Identity cluster); the Monitoring
API's `MetricThreshold.comparison` (metric-threshold conditions accept COMPARISON_GT and
COMPARISON_LT only); terraform-provider-google#11102 (a new log-based metric is not visible to
alert policies for up to 10 minutes: 404 "Cannot find metric(s)").
"""

from __future__ import annotations

import asyncio
import json

import pulumi
import pytest
from dependency_graph import DependencyGraph

from components.gcp import observability
from components.gcp.observability import retry_until_metric_visible
from spotctl.preview.resources import PreviewResource

CLUSTER = "gcp:container/cluster:Cluster"
ALERT_POLICY = "gcp:monitoring/alertPolicy:AlertPolicy"
SERVICE = "gcp:projects/service:Service"
POOL_SUFFIX = ".svc.id.goog"
# What the Monitoring API accepts as a metric threshold's comparison (MetricThreshold.comparison).
THRESHOLD_COMPARISONS = ("COMPARISON_GT", "COMPARISON_LT")
# The API each resource type calls (pulumi-gcp 10.x resource docs, "API documentation" links).
API_OF_TYPE = {
    "gcp:compute/": "compute.googleapis.com",
    "gcp:container/": "container.googleapis.com",
    "gcp:kms/": "cloudkms.googleapis.com",
    "gcp:storage/": "storage.googleapis.com",
    "gcp:artifactregistry/": "artifactregistry.googleapis.com",
    "gcp:logging/": "logging.googleapis.com",
    "gcp:monitoring/": "monitoring.googleapis.com",
    "gcp:cloudquota/": "cloudquotas.googleapis.com",
    "gcp:cloudscheduler/": "cloudscheduler.googleapis.com",
    "gcp:serviceaccount/": "iam.googleapis.com",
    "gcp:projects/iAMCustomRole:": "iam.googleapis.com",
    # Project IAM policies are read and set through Cloud Resource Manager.
    "gcp:projects/iAMMember:": "cloudresourcemanager.googleapis.com",
}


def pool_problems(resources: list[PreviewResource]) -> list[str]:
    """One line per resource that names a Workload Identity pool but may be created before every
    cluster of the stack (the pool does not exist until then)."""
    graph = DependencyGraph(resources)
    clusters = [r for r in resources if r.type == CLUSTER]
    problems = []
    for resource in resources:
        if resource.type == CLUSTER or not resource.custom:
            continue
        for field, value in resource.inputs.items():
            if POOL_SUFFIX not in json.dumps(value):
                continue
            problems += [
                f"{resource.name}.{field}: names a Workload Identity pool but does not wait for "
                f"cluster {cluster.name}, which creates it"
                for cluster in clusters
                if not graph.waits_for(resource, cluster)
            ]
    return problems


def comparison_problems(resources: list[PreviewResource]) -> list[str]:
    """One line per metric-threshold condition whose comparison the Monitoring API refuses."""
    return [
        f"{policy.name}.conditions[{index}].conditionThreshold.comparison: "
        f"{threshold.get('comparison')} is not one of {', '.join(THRESHOLD_COMPARISONS)}"
        for policy in resources
        if policy.type == ALERT_POLICY
        for index, condition in enumerate(policy.inputs.get("conditions", []))
        if (threshold := condition.get("conditionThreshold")) is not None
        and threshold.get("comparison") not in THRESHOLD_COMPARISONS
    ]


def _resource(name: str, type_: str, inputs: dict, dependencies=()) -> PreviewResource:
    return PreviewResource(
        urn=f"urn:pulumi:t::p::{type_}::{name}",
        type=type_,
        name=name,
        parent=None,
        custom=True,
        inputs=inputs,
        dependencies=list(dependencies),
    )


# --- the Workload Identity pool


def test_what_names_the_pool_waits_for_the_cluster(stack_preview):
    resources = stack_preview("gcp-prod").resources
    named = [r for r in resources if r.type != CLUSTER and POOL_SUFFIX in json.dumps(r.inputs)]
    assert len(named) == 2, "each team's Workload Identity binding names the pool"
    assert pool_problems(resources) == []


def test_a_binding_created_before_its_cluster_is_named_in_one_line():
    cluster = _resource(
        "gke", CLUSTER, {"workloadIdentityConfig": {"workloadPool": "p.svc.id.goog"}}
    )
    member = "serviceAccount:p.svc.id.goog[team-a/training]"
    early = _resource("early", "gcp:serviceaccount/iAMMember:IAMMember", {"member": member})
    late = _resource("late", early.type, {"member": member}, dependencies=[cluster.urn])
    assert pool_problems([cluster, early, late]) == [
        "early.member: names a Workload Identity pool but does not wait for cluster gke, which "
        "creates it"
    ]


# --- the APIs a new project lacks


@pytest.mark.parametrize("stack", ["gcp-prod", "gcp-dev"])
def test_every_resource_waits_for_the_apis_it_calls(stack_preview, stack):
    resources = stack_preview(stack).resources
    graph = DependencyGraph(resources)
    services = {r.inputs["service"]: r for r in resources if r.type == SERVICE}
    for resource in resources:
        if not resource.custom or resource.type in (SERVICE, "pulumi:providers:gcp"):
            continue
        if not resource.type.startswith("gcp:"):
            continue
        (api,) = [api for prefix, api in API_OF_TYPE.items() if resource.type.startswith(prefix)]
        assert api in services, f"{resource.name} calls {api}, which the stack does not enable"
        assert graph.before(resource) >= {s.urn for s in services.values()}, resource.name
    for service in services.values():
        assert service.inputs["disableOnDestroy"] is False


def test_calls_bill_to_the_project_not_to_the_callers_quota_project(stack_preview):
    (provider,) = stack_preview("gcp-prod").of_type("pulumi:providers:gcp")
    assert provider.inputs["billingProject"] == provider.inputs["project"]
    assert provider.inputs["userProjectOverride"] == "true"


# --- alert policies


def test_alert_policies_compare_the_way_the_api_accepts(stack_preview):
    resources = stack_preview("gcp-prod").resources
    assert len([r for r in resources if r.type == ALERT_POLICY]) == 2
    assert comparison_problems(resources) == []


def test_a_comparison_the_api_refuses_is_named_in_one_line():
    policy = _resource(
        "preemptions",
        ALERT_POLICY,
        {"conditions": [{"conditionThreshold": {"comparison": "COMPARISON_GE"}}]},
    )
    assert comparison_problems([policy]) == [
        "preemptions.conditions[0].conditionThreshold.comparison: COMPARISON_GE is not one of "
        "COMPARISON_GT, COMPARISON_LT"
    ]


def test_preemption_alert_pages_at_the_configured_count(stack_preview):
    preview = stack_preview("gcp-prod")
    (policy,) = [p for p in preview.of_type(ALERT_POLICY) if p.name.endswith("PreemptionsHigh")]
    threshold = policy.inputs["conditions"][0]["conditionThreshold"]
    # gcp-prod pages at 20 an hour; the hourly sum is whole, so "above 19" is "20 or more".
    assert (threshold["comparison"], threshold["thresholdValue"]) == ("COMPARISON_GT", 19)


def test_the_alert_on_the_log_metric_waits_for_it_and_retries_until_visible(stack_preview):
    preview = stack_preview("gcp-prod")
    metric = preview.one("gcp:logging/metric:Metric")
    (policy,) = [p for p in preview.of_type(ALERT_POLICY) if p.name.endswith("PreemptionsHigh")]
    assert metric.urn in policy.dependencies
    assert policy.error_hooks == ["prod-observability-metric-visible"]
    (gpu_idle,) = [p for p in preview.of_type(ALERT_POLICY) if p.name.endswith("GpuIdleHigh")]
    assert gpu_idle.error_hooks == [], "a built-in metric exists from the start"


def _failed(*errors: str) -> pulumi.ErrorHookArgs:
    return pulumi.ErrorHookArgs(
        urn="u", id="", name="p", type=ALERT_POLICY, failed_operation="create", errors=list(errors)
    )


def test_the_retry_hook_retries_only_a_metric_not_yet_visible(monkeypatch):
    # As long as Monitoring says a new metric may take.
    assert observability.METRIC_RETRIES * observability.METRIC_RETRY_SECONDS >= 600
    monkeypatch.setattr(observability, "METRIC_RETRY_SECONDS", 0)
    not_yet = (
        'googleapi: Error 404: Cannot find metric(s) that match type = "logging.googleapis.com/'
        'user/prod-observability-spot-preemptions". If a metric was created recently, it could '
        "take up to 10 minutes to become available. Please try again soon."
    )
    assert asyncio.run(retry_until_metric_visible(_failed(not_yet))) is True
    denied = "googleapi: Error 403: Permission monitoring.alertPolicies.create denied"
    assert asyncio.run(retry_until_metric_visible(_failed(denied, not_yet))) is False
    too_long = [not_yet] * (observability.METRIC_RETRIES + 1)
    assert asyncio.run(retry_until_metric_visible(_failed(*too_long))) is False
