"""Interruption plumbing: EventBridge rules into one SQS queue, for the node termination
handler in queue mode (it cordons and drains a node as soon as its recall is announced)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.aws.iam import PodIdentity, pod_identity_role
from components.config import INTERRUPTION_QUEUE_RETENTION_SECONDS

# Rule suffix -> EventBridge pattern. These are the events the handler acts on in queue mode.
EVENT_PATTERNS = {
    "spot-interruption": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Spot Instance Interruption Warning"],
    },
    "rebalance": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Instance Rebalance Recommendation"],
    },
    "asg-lifecycle": {
        "source": ["aws.autoscaling"],
        "detail-type": ["EC2 Instance-terminate Lifecycle Action"],
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
    # Where the node termination handler runs: its service account gets the consumer role.
    handler: PodIdentity | None = None
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
                description=f"{suffix} events for the node termination handler",
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
        if args.handler is not None:
            self._handler_role(name, args, queue)
        self.queue_url, self.queue_arn, self.queue_name = queue.url, queue.arn, queue.name
        self.rule_names = {suffix: rule.name for suffix, rule in rules.items()}
        self.register_outputs(
            {"queue_url": self.queue_url, "queue_arn": self.queue_arn, **self.rule_names}
        )

    def _handler_role(self, name: str, args: InterruptionQueueArgs, queue: aws.sqs.Queue) -> None:
        """What the handler needs in queue mode: consume this queue, look up the instance,
        and let its ASG go on once the node is drained."""
        pod_identity_role(
            f"{name}-handler",
            args.handler,
            policy=pulumi.Output.json_dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "ConsumeQueue",
                            "Effect": "Allow",
                            "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
                            "Resource": queue.arn,
                        },
                        {
                            "Sid": "ResolveAndReleaseInstances",
                            "Effect": "Allow",
                            "Action": [
                                "ec2:DescribeInstances",
                                "autoscaling:DescribeAutoScalingInstances",
                                "autoscaling:DescribeTags",
                                "autoscaling:CompleteLifecycleAction",
                            ],
                            "Resource": "*",
                        },
                    ],
                }
            ),
            tags=args.tags,
            parent=self,
        )
