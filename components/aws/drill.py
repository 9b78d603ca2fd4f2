"""The monthly cloud drill on EKS: an AWS Fault Injection Service experiment template that sends
spot interruption notices to a share of one GPU class's spot nodes (docs/operations.md).

Sources: AWS FIS actions reference (`aws:ec2:send-spot-instance-interruptions`: targets
`SpotInstances` of resource type `aws:ec2:spot-instance`, parameter `durationBeforeInterruption`,
at least PT2M) and its IAM policy examples (`ec2:SendSpotInstanceInterruptions` on the instances,
`ec2:DescribeInstances` to resolve the targets). The template finds the nodes by the tags
Karpenter puts on every instance it launches; the role may interrupt only instances that carry
both, so the template cannot reach another cluster or class even if its tags were edited.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

ACTION = "aws:ec2:send-spot-instance-interruptions"
# Karpenter's tags on the instances of a NodePool, and of its cluster.
NODEPOOL_TAG = "karpenter.sh/nodepool"
CLUSTER_TAG = "eks:eks-cluster-name"
# EC2's two-minute warning, as a real interruption gives it.
NOTICE = "PT2M"
# The template's own tag naming the pool it hits; with the cost tags' `env` it is how
# `spotctl drill --cloud-run` finds the stack's template (FIS ListExperimentTemplates gives tags).
DRILL_TAG = "spot-drill"


def interruption_policy(cluster_name: str, pool_name: str) -> dict:
    """What FIS may do with the role: find instances, and interrupt this pool's spot nodes."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ResolveTargets",
                "Effect": "Allow",
                "Action": "ec2:DescribeInstances",
                "Resource": "*",
            },
            {
                "Sid": "InterruptThisPool",
                "Effect": "Allow",
                "Action": "ec2:SendSpotInstanceInterruptions",
                "Resource": "arn:aws:ec2:*:*:instance/*",
                "Condition": {
                    "StringEquals": {
                        f"aws:ResourceTag/{NODEPOOL_TAG}": pool_name,
                        f"aws:ResourceTag/{CLUSTER_TAG}": cluster_name,
                    }
                },
            },
        ],
    }


@dataclass(frozen=True)
class SpotDrillArgs:
    cluster_name: pulumi.Input[str]
    pool_name: str  # the Karpenter NodePool of one class's spot capacity
    percent: int  # of the pool's running spot nodes that get a notice
    tags: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.percent <= 100:
            raise ValueError(f"SpotDrillArgs.percent: {self.percent} is not within 1..100")


class SpotDrill(pulumi.ComponentResource):
    """The experiment template and the role it runs as; `spotctl drill --cloud-run` starts it."""

    template_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: SpotDrillArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:aws:SpotDrill", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "fis.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
            tags=args.tags,
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-interrupt",
            role=role.id,
            policy=pulumi.Output.from_input(args.cluster_name).apply(
                lambda cluster: json.dumps(interruption_policy(cluster, args.pool_name))
            ),
            opts=child,
        )
        template = aws.fis.ExperimentTemplate(
            f"{name}-template",
            description=f"Spot interruption notices to {args.percent}% of {args.pool_name}",
            role_arn=role.arn,
            targets=[
                {
                    "name": "SpotInstances",
                    "resource_type": "aws:ec2:spot-instance",
                    "selection_mode": f"PERCENT({args.percent})",
                    "resource_tags": [
                        {"key": NODEPOOL_TAG, "value": args.pool_name},
                        {"key": CLUSTER_TAG, "value": args.cluster_name},
                    ],
                    "filters": [{"path": "State.Name", "values": ["running"]}],
                }
            ],
            actions=[
                {
                    "name": "interrupt",
                    "action_id": ACTION,
                    "parameters": [{"key": "durationBeforeInterruption", "value": NOTICE}],
                    "target": {"key": "SpotInstances", "value": "SpotInstances"},
                }
            ],
            # The drill is the point; the runtime's metrics judge it afterwards.
            stop_conditions=[{"source": "none"}],
            tags={**args.tags, DRILL_TAG: args.pool_name},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )
        self.template_id = template.id
        self.register_outputs({"template_id": self.template_id})
