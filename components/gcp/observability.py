"""Observability on GCP: a log-based metric of Spot preemptions, a Cloud Monitoring dashboard
(preemptions, pool sizes, GPU utilisation, checkpoint age), alert policies that link their
runbooks, and email notification channels.

Threshold conditions compare with COMPARISON_GT or COMPARISON_LT only: the Monitoring API
refuses the others for metric thresholds. A log-based metric becomes visible to alert policies
minutes after it is created (404 "Cannot find metric(s)"), so the policy on it retries its create
through an error hook until the metric shows, as long as Monitoring says it may take.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

RUNBOOKS = "runbooks/gcp"  # below the runbook base URL
# Compute Engine writes a system-event audit log entry for every Spot / preemptible recall.
PREEMPTION_FILTER = (
    'resource.type="gce_instance" AND '
    'logName="projects/{project}/logs/cloudaudit.googleapis.com%2Fsystem_event" AND '
    'protoPayload.methodName="compute.instances.preempted"'
)
GPU_DUTY_CYCLE = "kubernetes.io/node/accelerator/duty_cycle"
# GKE labels each node VM with its cluster and node pool.
NODE_POOL_LABEL = 'metadata.user_labels."goog-k8s-node-pool-name"'
CLUSTER_LABEL = 'metadata.user_labels."goog-k8s-cluster-name"'
# The runtime's gauge, scraped by Managed Service for Prometheus.
CHECKPOINT_AGE_QUERY = "max by (namespace) (spotsafe_checkpoint_age_seconds)"
# GKE's DCGM component writes the exporter's metrics to Managed Service for Prometheus, where
# PromQL reads them with the cluster as a label.
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# The API's answer while a new metric is not yet visible; it says this takes up to 10 minutes.
METRIC_NOT_YET_VISIBLE = re.compile(r"Cannot find metric\(s\)|metric referenced by the provided")
METRIC_RETRY_SECONDS = 30
METRIC_RETRIES = 24  # 12 minutes


async def retry_until_metric_visible(args: pulumi.ErrorHookArgs) -> bool:
    """Retry a policy's create while Monitoring does not yet know its new metric; any other
    error, or one past the wait Monitoring announces, fails as usual."""
    if len(args.errors) > METRIC_RETRIES or not METRIC_NOT_YET_VISIBLE.search(args.errors[0]):
        return False
    await asyncio.sleep(METRIC_RETRY_SECONDS)
    return True


@dataclass(frozen=True)
class ObservabilityArgs:
    project: str
    cluster_name: pulumi.Input[str]
    runbook_base_url: str
    emails: list[str] = field(default_factory=list)
    preemptions_per_hour: int = 10
    gpu_idle_percent: int = 50
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The alert fires below 100 - this utilisation: at 100 it never would.
        if not 1 <= self.gpu_idle_percent <= 99:
            raise ValueError("ObservabilityArgs.gpu_idle_percent: between 1 and 99")
        if self.preemptions_per_hour < 1:
            raise ValueError("ObservabilityArgs.preemptions_per_hour: must be at least 1")


class Observability(pulumi.ComponentResource):
    preemption_metric: pulumi.Output[str]
    dashboard: pulumi.Output[str]
    notification_channels: list[pulumi.Output[str]]

    def __init__(
        self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:gcp:Observability", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        metric = gcp.logging.Metric(
            f"{name}-spot-preemptions",
            project=args.project,
            name=f"{name}-spot-preemptions",
            description="Spot / preemptible VMs recalled by Compute Engine",
            filter=PREEMPTION_FILTER.format(project=args.project),
            metric_descriptor={
                "metric_kind": "DELTA",
                "value_type": "INT64",
                "unit": "1",
                "labels": [{"key": "zone", "value_type": "STRING"}],
            },
            label_extractors={"zone": "EXTRACT(resource.labels.zone)"},
            opts=child,
        )
        preemptions = metric.name.apply(
            lambda metric_name: (
                f'metric.type="logging.googleapis.com/user/{metric_name}" AND '
                'resource.type="gce_instance"'
            )
        )
        channels = [
            gcp.monitoring.NotificationChannel(
                f"{name}-email-{index}",
                project=args.project,
                type="email",
                display_name=f"Spot training alerts: {email}",
                labels={"email_address": email},
                user_labels=args.labels,
                opts=child,
            ).name
            for index, email in enumerate(args.emails)
        ]
        gpu_filter = pulumi.Output.concat(
            f'metric.type="{GPU_DUTY_CYCLE}" AND resource.type="k8s_node" AND ',
            'resource.labels.cluster_name="',
            args.cluster_name,
            '"',
        )
        alerts = {
            "SpotPreemptionsHigh": {
                "why": "Spot capacity in use is being recalled faster than planned",
                "severity": "ERROR",
                "filter": preemptions,
                "aligner": "ALIGN_SUM",
                "reducer": "REDUCE_SUM",
                "period": 3600,
                "duration": 0,
                # The hourly sum is a whole number: above N - 1 is N or more.
                "comparison": "COMPARISON_GT",
                "threshold": args.preemptions_per_hour - 1,
                "metric": metric,
            },
            "GpuIdleHigh": {
                "why": f"GPUs sat more than {args.gpu_idle_percent}% idle for three hours",
                "severity": "WARNING",
                "filter": gpu_filter,
                "aligner": "ALIGN_MEAN",
                "reducer": "REDUCE_MEAN",
                "period": 3600,
                "duration": 3 * 3600,
                "comparison": "COMPARISON_LT",
                "threshold": 100 - args.gpu_idle_percent,
            },
        }
        runbooks = f"{args.runbook_base_url.rstrip('/')}/{RUNBOOKS}"
        metric_visible = pulumi.ErrorHook(f"{name}-metric-visible", retry_until_metric_visible)
        for alert_name, spec in alerts.items():
            waits = (
                pulumi.ResourceOptions(
                    depends_on=[spec["metric"]],
                    hooks=pulumi.ResourceHookBinding(on_error=[metric_visible]),
                )
                if "metric" in spec
                else None
            )
            runbook = f"{runbooks}/{alert_name}.md"
            gcp.monitoring.AlertPolicy(
                f"{name}-{alert_name}",
                project=args.project,
                display_name=f"{name} {alert_name}",
                combiner="OR",
                severity=spec["severity"],
                conditions=[
                    {
                        "display_name": alert_name,
                        "condition_threshold": {
                            "filter": spec["filter"],
                            "aggregations": [
                                {
                                    "alignment_period": f"{spec['period']}s",
                                    "per_series_aligner": spec["aligner"],
                                    "cross_series_reducer": spec["reducer"],
                                }
                            ],
                            "comparison": spec["comparison"],
                            "threshold_value": spec["threshold"],
                            "duration": f"{spec['duration']}s",
                        },
                    }
                ],
                documentation={
                    "mime_type": "text/markdown",
                    "subject": f"{alert_name} ({name})",
                    "content": f"{spec['why']}. Runbook: {runbook}",
                    "links": [{"display_name": "Runbook", "url": runbook}],
                },
                notification_channels=channels,
                user_labels=args.labels,
                opts=pulumi.ResourceOptions.merge(child, waits),
            )
        dashboard = gcp.monitoring.Dashboard(
            f"{name}-dashboard",
            project=args.project,
            dashboard_json=pulumi.Output.json_dumps(
                dashboard_body(f"{name} spot training", preemptions, args.cluster_name, gpu_filter)
            ),
            opts=child,
        )
        self.preemption_metric, self.dashboard = metric.name, dashboard.id
        self.notification_channels = channels
        self.register_outputs(
            {
                "preemption_metric": self.preemption_metric,
                "dashboard": self.dashboard,
                "notification_channels": channels,
            }
        )


def gpu_idle_share_query(cluster_name: pulumi.Input[str]) -> pulumi.Output[str]:
    """PromQL: the share of the cluster's GPUs under 5 % busy, as the in-cluster dashboard
    computes it where the DCGM exporter runs in the cluster."""
    series = pulumi.Output.concat(DCGM_GPU_UTIL, '{cluster="', cluster_name, '"}')
    return pulumi.Output.concat("count(", series, " < 5) / count(", series, ")")


def _chart(title: str, query: dict, x: int, y: int) -> dict:
    return {
        "xPos": x,
        "yPos": y,
        "width": 24,
        "height": 16,
        "widget": {
            "title": title,
            "xyChart": {"dataSets": [{"timeSeriesQuery": query, "plotType": "LINE"}]},
        },
    }


def _filtered(filter_: pulumi.Input[str], aggregation: dict) -> dict:
    return {"timeSeriesFilter": {"filter": filter_, "aggregation": aggregation}}


def dashboard_body(
    title: str,
    preemptions: pulumi.Input[str],
    cluster_name: pulumi.Input[str],
    gpu_filter: pulumi.Input[str],
) -> dict:
    nodes = pulumi.Output.concat(
        'metric.type="compute.googleapis.com/instance/uptime" AND resource.type="gce_instance" '
        f"AND {CLUSTER_LABEL}=",
        '"',
        cluster_name,
        '"',
    )
    return {
        "displayName": title,
        "mosaicLayout": {
            "columns": 48,
            "tiles": [
                _chart(
                    "Spot preemptions per hour, by zone",
                    _filtered(
                        preemptions,
                        {
                            "alignmentPeriod": "3600s",
                            "perSeriesAligner": "ALIGN_SUM",
                            "crossSeriesReducer": "REDUCE_SUM",
                            "groupByFields": ["metric.label.zone"],
                        },
                    ),
                    0,
                    0,
                ),
                _chart(
                    "Pool sizes (nodes per node pool)",
                    _filtered(
                        nodes,
                        {
                            "alignmentPeriod": "300s",
                            "perSeriesAligner": "ALIGN_RATE",
                            "crossSeriesReducer": "REDUCE_COUNT",
                            "groupByFields": [NODE_POOL_LABEL],
                        },
                    ),
                    24,
                    0,
                ),
                _chart(
                    "GPU utilisation (%), by accelerator model",
                    _filtered(
                        gpu_filter,
                        {
                            "alignmentPeriod": "300s",
                            "perSeriesAligner": "ALIGN_MEAN",
                            "crossSeriesReducer": "REDUCE_MEAN",
                            "groupByFields": ["metric.label.model"],
                        },
                    ),
                    0,
                    16,
                ),
                _chart(
                    "Checkpoint age (s), by team namespace",
                    {"prometheusQuery": CHECKPOINT_AGE_QUERY},
                    24,
                    16,
                ),
                _chart(
                    "Accelerator idle share (DCGM: GPUs under 5 % busy)",
                    {"prometheusQuery": gpu_idle_share_query(cluster_name)},
                    0,
                    32,
                ),
            ],
        },
    }
