"""Alerts on AWS: an alarm must be able to reach the topic it notifies."""

from __future__ import annotations

from policies.inputs import as_list, of_type, refers_to
from policies.rule import MANDATORY, StackRule

TOPIC = "aws:sns/topic:Topic"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
ALARM_ACTIONS = ("alarmActions", "okActions", "insufficientDataActions")


def _notifies(alarm, topic) -> bool:
    arn = topic.props.get("arn")
    return any(
        refers_to(alarm, prop, topic) or (arn is not None and arn in as_list(alarm.props.get(prop)))
        for prop in ALARM_ACTIONS
    )


def _check_alarm_topic_key(args, report_violation, _settings) -> None:
    for topic in of_type(args.resources, TOPIC):
        key = topic.props.get("kmsMasterKeyId")
        if not (isinstance(key, str) and key.startswith("alias/aws/")):
            continue
        alarms = [a.name for a in of_type(args.resources, ALARM) if _notifies(a, topic)]
        if alarms:
            report_violation(
                f"SNS topic '{topic.name}' is encrypted with the AWS-managed key {key}, which "
                f"CloudWatch cannot use: alarms {', '.join(sorted(alarms))} would never arrive",
                topic.urn,
            )


POLICIES = [
    StackRule(
        "sns-alarm-topic-customer-key",
        "SNS topics that CloudWatch alarms notify are not encrypted with an AWS-managed key "
        "(alias/aws/sns): use a customer-managed key whose policy lets CloudWatch use it.",
        "CloudWatch cannot use the AWS-managed SNS key; every alarm to such a topic is dropped "
        "without an error.",
        _check_alarm_topic_key,
        MANDATORY,
        fix=(
            "Set the topic's kmsMasterKeyId to a customer-managed KMS key whose policy allows "
            "cloudwatch.amazonaws.com kms:Decrypt and kms:GenerateDataKey*."
        ),
    ),
]
