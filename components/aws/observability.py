"""Observability: a CloudWatch dashboard, metric alarms, and the alert topic they publish to.

The topic is encrypted with a key of its own whose policy lets CloudWatch publish (the
AWS-managed SNS key does not), and it is where Alertmanager delivers too, through a role bound
to its service account. Every alarm names its runbook.

The dead man's switch lives outside the cluster: Alertmanager publishes its always-firing
heartbeat (Watchdog) every minute to a topic of its own, SNS counts what is published to it
(`NumberOfMessagesPublished`, published only while messages arrive), and an alarm that treats
a missing count as breaching pages through the alert topic once the heartbeat has been silent
for HEARTBEAT_SILENCE_MINUTES: Prometheus, Alertmanager, their nodes or the delivery path down.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.aws.iam import PodIdentity, pod_identity_role

RUNBOOKS = "runbooks/aws"  # below the runbook base URL
HEARTBEAT_ALARM = "AlertmanagerHeartbeatMissing"
HEARTBEAT_PERIOD_SECONDS = 300  # SNS publishes its topic metrics in 5-minute periods
HEARTBEAT_SILENCE_MINUTES = 15


@dataclass(frozen=True)
class ObservabilityArgs:
    account_id: pulumi.Input[str]
    cluster_name: pulumi.Input[str]
    region: str
    spot_interruption_rule: pulumi.Input[str]
    rebalance_rule: pulumi.Input[str]
    interruption_queue: pulumi.Input[str]
    pool_groups: dict[str, pulumi.Input[str]]  # tier -> autoscaling group name
    runbook_base_url: str
    emails: list[str]
    # Alertmanager's service account: it publishes to the alert topic.
    alertmanager: PodIdentity | None = None
    interruptions_per_hour: int = 10
    queue_age_seconds: int = 120
    gpu_idle_percent: int = 50
    kms_deletion_window_days: int = 30
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.emails:
            raise ValueError("ObservabilityArgs.emails: at least one, or alarms reach no one")
        if not 1 <= self.gpu_idle_percent <= 99:
            raise ValueError("ObservabilityArgs.gpu_idle_percent: between 1 and 99")
        for attr in ("interruptions_per_hour", "queue_age_seconds"):
            if getattr(self, attr) < 1:
                raise ValueError(f"ObservabilityArgs.{attr}: must be at least 1")


def alert_key_policy(account_id: str) -> dict:
    """The account administers the key (through IAM); CloudWatch may use it to publish alarms."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AccountAdministersThroughIam",
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{account_id}:root"},
                "Action": "kms:*",
                "Resource": "*",
            },
            {
                "Sid": "CloudWatchAlarmsPublish",
                "Effect": "Allow",
                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                "Resource": "*",
            },
        ],
    }


def tls_only_topic_policy(topic_arn: str) -> dict:
    """Nothing may talk to the topic without TLS."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "DenyInsecureTransport",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "sns:*",
                "Resource": topic_arn,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ],
    }


def alert_topic_policy(topic_arn: str, account_id: str, region: str) -> dict:
    """This account's alarms may publish; nothing may talk to the topic without TLS."""
    alarms = f"arn:aws:cloudwatch:{region}:{account_id}:alarm:*"
    policy = tls_only_topic_policy(topic_arn)
    policy["Statement"].insert(
        0,
        {
            "Sid": "CloudWatchAlarmsPublish",
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": "sns:Publish",
            "Resource": topic_arn,
            "Condition": {
                "ArnLike": {"aws:SourceArn": alarms},
                "StringEquals": {"aws:SourceAccount": account_id},
            },
        },
    )
    return policy


class Observability(pulumi.ComponentResource):
    topic_arn: pulumi.Output[str]
    heartbeat_topic_arn: pulumi.Output[str]
    dashboard_name: pulumi.Output[str]

    def __init__(
        self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:observability:Observability", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        key = aws.kms.Key(
            f"{name}-alerts-key",
            description="Alert topic encryption (CloudWatch alarms and Alertmanager publish)",
            enable_key_rotation=True,
            deletion_window_in_days=args.kms_deletion_window_days,
            policy=pulumi.Output.from_input(args.account_id).apply(
                lambda account: json.dumps(alert_key_policy(account))
            ),
            tags=args.tags,
            opts=child,
        )
        topic = aws.sns.Topic(
            f"{name}-alerts", kms_master_key_id=key.arn, tags=args.tags, opts=child
        )
        aws.sns.TopicPolicy(
            f"{name}-alerts-policy",
            arn=topic.arn,
            policy=pulumi.Output.all(topic.arn, args.account_id).apply(
                lambda values: json.dumps(alert_topic_policy(*values, args.region))
            ),
            opts=child,
        )
        # Nobody subscribes: only its message count matters.
        heartbeat = aws.sns.Topic(
            f"{name}-heartbeat", kms_master_key_id=key.arn, tags=args.tags, opts=child
        )
        aws.sns.TopicPolicy(
            f"{name}-heartbeat-policy",
            arn=heartbeat.arn,
            policy=heartbeat.arn.apply(lambda arn: json.dumps(tls_only_topic_policy(arn))),
            opts=child,
        )
        for index, email in enumerate(args.emails):
            aws.sns.TopicSubscription(
                f"{name}-alerts-{index}",
                topic=topic.arn,
                protocol="email",
                endpoint=email,
                opts=child,
            )
        if args.alertmanager is not None:
            pod_identity_role(
                f"{name}-alertmanager",
                args.alertmanager,
                policy=pulumi.Output.json_dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Sid": "PublishAlertsAndHeartbeat",
                                "Effect": "Allow",
                                "Action": "sns:Publish",
                                "Resource": [topic.arn, heartbeat.arn],
                            },
                            {
                                "Sid": "UseAlertKey",
                                "Effect": "Allow",
                                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                                "Resource": key.arn,
                            },
                        ],
                    }
                ),
                tags=args.tags,
                parent=self,
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
                "why": "Karpenter is not consuming interruption notices",
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
        alarms[HEARTBEAT_ALARM] = {
            "namespace": "AWS/SNS",
            "metric_name": "NumberOfMessagesPublished",
            "dimensions": {"TopicName": heartbeat.name},
            "statistic": "Sum",
            "period": HEARTBEAT_PERIOD_SECONDS,
            "evaluation_periods": HEARTBEAT_SILENCE_MINUTES * 60 // HEARTBEAT_PERIOD_SECONDS,
            "threshold": 1,
            "comparison_operator": "LessThanThreshold",
            # No message, no data point: silence is the failure this alarm exists for.
            "treat_missing_data": "breaching",
            "why": "Alertmanager's heartbeat stopped arriving: in-cluster alerts may reach no one",
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
        self.heartbeat_topic_arn = heartbeat.arn
        self.register_outputs(
            {
                "topic_arn": self.topic_arn,
                "heartbeat_topic_arn": self.heartbeat_topic_arn,
                "dashboard_name": self.dashboard_name,
            }
        )


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
