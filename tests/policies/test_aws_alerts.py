"""Alarms reach their topic: no alarm notifies a topic encrypted with an AWS-managed key."""

from __future__ import annotations

import pytest
from spot_policy_cases import resource

TOPIC = "aws:sns/topic:Topic"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
TOPIC_ARN = "arn:aws:sns:us-east-1:123456789012:alerts"


@pytest.mark.parametrize(
    ("case", "topic_inputs", "violates"),
    [
        ("compliant: customer key", {"kmsMasterKeyId": "arn:aws:kms:us-east-1:1:key/k"}, False),
        ("violating: AWS-managed key", {"kmsMasterKeyId": "alias/aws/sns"}, True),
        ("missing: unencrypted", {}, False),
    ],
)
def test_alarm_topic_customer_key(violations, case, topic_inputs, violates):
    topic = resource(TOPIC, "alerts", topic_inputs)
    alarm = resource(ALARM, "SpotInterruptionsHigh", {"alarmActions": [TOPIC_ARN]}, deps=(topic,))
    found = violations("sns-alarm-topic-customer-key", topic, alarm)
    assert bool(found) == violates, case
    if violates:
        assert found == [
            "SNS topic 'alerts' is encrypted with the AWS-managed key alias/aws/sns, which "
            "CloudWatch cannot use: alarms SpotInterruptionsHigh would never arrive"
        ]


def test_a_topic_no_alarm_notifies_may_use_the_managed_key(violations):
    topic = resource(TOPIC, "app-events", {"kmsMasterKeyId": "alias/aws/sns"})
    alarm = resource(ALARM, "other", {"alarmActions": ["arn:aws:sns:us-east-1:1:elsewhere"]})
    assert violations("sns-alarm-topic-customer-key", topic, alarm) == []
