"""Interruption plumbing: EventBridge rules into one SQS queue, which Karpenter's interruption
handling reads. On a spot interruption warning, a scheduled maintenance or an instance stopping,
Karpenter taints and drains the node and starts a replacement; a rebalance recommendation it
only records (an event), so it never drains a training run: the runtime saves and trains on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.config import INTERRUPTION_QUEUE_RETENTION_SECONDS

# Rule suffix -> EventBridge pattern: the events Karpenter's interruption handling reads.
EVENT_PATTERNS = {
    "spot-interruption": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Spot Instance Interruption Warning"],
    },
    "rebalance": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Instance Rebalance Recommendation"],
    },
    "state-change": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Instance State-change Notification"],
    },
    "scheduled-change": {
        "source": ["aws.health"],
        "detail-type": ["AWS Health Event"],
        "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
    },
}


@dataclass(frozen=True)
class InterruptionQueueArgs:
    tags: dict[str, str] = field(default_factory=dict)


class InterruptionQueue(pulumi.ComponentResource):
    queue_url: pulumi.Output[str]
    queue_arn: pulumi.Output[str]
    queue_name: pulumi.Output[str]
    rule_names: dict[str, pulumi.Output[str]]

    def __init__(
        self, name: str, args: InterruptionQueueArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:interruption:InterruptionQueue", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        queue = aws.sqs.Queue(
            f"{name}-queue",
            message_retention_seconds=INTERRUPTION_QUEUE_RETENTION_SECONDS,
            sqs_managed_sse_enabled=True,
            tags=args.tags,
            opts=child,
        )
        rules = {}
        for suffix, pattern in EVENT_PATTERNS.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{suffix}",
                description=f"{suffix} events for Karpenter's interruption handling",
                event_pattern=json.dumps(pattern),
                tags=args.tags,
                opts=child,
            )
            aws.cloudwatch.EventTarget(
                f"{name}-{suffix}", rule=rule.name, arn=queue.arn, opts=child
            )
            rules[suffix] = rule
        aws.sqs.QueuePolicy(
            f"{name}-queue-policy",
            queue_url=queue.url,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "EventBridgeDelivers",
                            "Effect": "Allow",
                            "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                            "Action": "sqs:SendMessage",
                            "Resource": queue.arn,
                            "Condition": {
                                "ArnEquals": {"aws:SourceArn": [r.arn for r in rules.values()]}
                            },
                        },
                        {
                            "Sid": "DenyInsecureTransport",
                            "Effect": "Deny",
                            "Principal": "*",
                            "Action": "sqs:*",
                            "Resource": queue.arn,
                            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                        },
                    ],
                }
            ),
            opts=child,
        )
        self.queue_url, self.queue_arn, self.queue_name = queue.url, queue.arn, queue.name
        self.rule_names = {suffix: rule.name for suffix, rule in rules.items()}
        self.register_outputs(
            {"queue_url": self.queue_url, "queue_arn": self.queue_arn, **self.rule_names}
        )
