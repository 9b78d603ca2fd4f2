"""Observability: a CloudWatch dashboard and metric alarms that notify an SNS topic.

Shows interruptions per hour, pool sizes and idle GPU capacity; every alarm names its runbook.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

RUNBOOKS = "runbooks/aws"  # below the runbook base URL
# Container Insights (with GPU metrics) comes from this EKS add-on.
OBSERVABILITY_ADDON = "amazon-cloudwatch-observability"


@dataclass(frozen=True)
class ObservabilityArgs:
    cluster_name: pulumi.Input[str]
    region: str
    spot_interruption_rule: pulumi.Input[str]
    rebalance_rule: pulumi.Input[str]
    interruption_queue: pulumi.Input[str]
    pool_groups: dict[str, pulumi.Input[str]]  # tier -> autoscaling group name
    runbook_base_url: str
    emails: list[str] = field(default_factory=list)
    interruptions_per_hour: int = 10
    queue_age_seconds: int = 120
    gpu_idle_percent: int = 50
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.gpu_idle_percent <= 100:
            raise ValueError("ObservabilityArgs.gpu_idle_percent: between 1 and 100")
        for attr in ("interruptions_per_hour", "queue_age_seconds"):
            if getattr(self, attr) < 1:
                raise ValueError(f"ObservabilityArgs.{attr}: must be at least 1")


class Observability(pulumi.ComponentResource):
    topic_arn: pulumi.Output[str]
    dashboard_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:observability:Observability", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        topic = aws.sns.Topic(
            f"{name}-alerts", kms_master_key_id="alias/aws/sns", tags=args.tags, opts=child
        )
        for index, email in enumerate(args.emails):
            aws.sns.TopicSubscription(
                f"{name}-alerts-{index}",
                topic=topic.arn,
                protocol="email",
                endpoint=email,
                opts=child,
            )
        aws.eks.Addon(
            f"{name}-container-insights",
            cluster_name=args.cluster_name,
            addon_name=OBSERVABILITY_ADDON,
            tags=args.tags,
            opts=child,
        )
        alarms = {
            "SpotInterruptionsHigh": {
                "namespace": "AWS/Events",
                "metric_name": "MatchedEvents",
                "dimensions": {"RuleName": args.spot_interruption_rule},
                "statistic": "Sum",
                "period": 3600,
                "evaluation_periods": 1,
                "threshold": args.interruptions_per_hour,
                "comparison_operator": "GreaterThanOrEqualToThreshold",
                "treat_missing_data": "notBreaching",
                "why": "spot capacity in use is being recalled faster than planned",
            },
            "InterruptionQueueStale": {
                "namespace": "AWS/SQS",
                "metric_name": "ApproximateAgeOfOldestMessage",
                "dimensions": {"QueueName": args.interruption_queue},
                "statistic": "Maximum",
                "period": 60,
                "evaluation_periods": 3,
                "threshold": args.queue_age_seconds,
                "comparison_operator": "GreaterThanThreshold",
                "treat_missing_data": "notBreaching",
                "why": "the node termination handler is not draining interruption notices",
            },
            "GpuIdleHigh": {
                "namespace": "ContainerInsights",
                "metric_name": "node_gpu_utilization",
                "dimensions": {"ClusterName": args.cluster_name},
                "statistic": "Average",
                "period": 3600,
                "evaluation_periods": 3,
                "threshold": 100 - args.gpu_idle_percent,
                "comparison_operator": "LessThanThreshold",
                "treat_missing_data": "notBreaching",
                "why": f"GPUs sat more than {args.gpu_idle_percent}% idle for three hours",
            },
        }
        runbooks = f"{args.runbook_base_url.rstrip('/')}/{RUNBOOKS}"
        for alarm_name, spec in alarms.items():
            why = spec.pop("why")
            aws.cloudwatch.MetricAlarm(
                f"{name}-{alarm_name}",
                alarm_description=f"{why}. Runbook: {runbooks}/{alarm_name}.md",
                alarm_actions=[topic.arn],
                ok_actions=[topic.arn],
                tags=args.tags,
                opts=child,
                **spec,
            )
        dashboard = aws.cloudwatch.Dashboard(
            f"{name}-dashboard",
            dashboard_name=f"{name}-spot-training",
            dashboard_body=pulumi.Output.json_dumps(dashboard_body(args)),
            opts=child,
        )
        self.topic_arn, self.dashboard_name = topic.arn, dashboard.dashboard_name
        self.register_outputs({"topic_arn": self.topic_arn, "dashboard_name": self.dashboard_name})


def dashboard_body(args: ObservabilityArgs) -> dict:
    def widget(title: str, metrics: list, stat: str, period: int, x: int, y: int) -> dict:
        return {
            "type": "metric",
            "x": x,
            "y": y,
            "width": 12,
            "height": 6,
            "properties": {
                "title": title,
                "region": args.region,
                "metrics": metrics,
                "stat": stat,
                "period": period,
                "view": "timeSeries",
            },
        }

    return {
        "widgets": [
            widget(
                "Spot interruptions per hour",
                [
                    ["AWS/Events", "MatchedEvents", "RuleName", args.spot_interruption_rule],
                    ["AWS/Events", "MatchedEvents", "RuleName", args.rebalance_rule],
                ],
                "Sum",
                3600,
                0,
                0,
            ),
            widget(
                "Pool sizes (in-service nodes)",
                [
                    [
                        "AWS/AutoScaling",
                        "GroupInServiceInstances",
                        "AutoScalingGroupName",
                        group,
                        {"label": tier},
                    ]
                    for tier, group in args.pool_groups.items()
                ],
                "Average",
                300,
                12,
                0,
            ),
            widget(
                "Idle GPU capacity (%)",
                [
                    [{"expression": "100 - m1", "label": "GPU idle %"}],
                    [
                        "ContainerInsights",
                        "node_gpu_utilization",
                        "ClusterName",
                        args.cluster_name,
                        {"id": "m1", "visible": False},
                    ],
                ],
                "Average",
                300,
                0,
                6,
            ),
            widget(
                "Oldest unhandled interruption notice (s)",
                [
                    [
                        "AWS/SQS",
                        "ApproximateAgeOfOldestMessage",
                        "QueueName",
                        args.interruption_queue,
                    ]
                ],
                "Maximum",
                60,
                12,
                6,
            ),
        ]
    }
