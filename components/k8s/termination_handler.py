"""The AWS node termination handler in queue mode: drains a node before EC2 takes it back.

It reads the interruption queue that EventBridge fills (spot interruption warnings, rebalance
recommendations, ASG lifecycle, instance state changes), cordons and drains the node, and so
gives every pod on it its full termination grace period while the instance is still there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.versions import NODE_TERMINATION_HANDLER

CHART = NODE_TERMINATION_HANDLER
NAMESPACE = CHART.namespace
# Fixed so the cloud side can bind the handler's identity (Pod Identity / IRSA) to it.
SERVICE_ACCOUNT = "aws-node-termination-handler"


@dataclass(frozen=True)
class NodeTerminationHandlerArgs:
    queue_url: pulumi.Input[str]
    region: str
    # Longest pod grace period on the node: the drain is scheduled to fit it.
    node_grace_seconds: int = 120
    service_account_annotations: dict[str, str] = field(default_factory=dict)
    # Where the handler runs: the stable pool, never a node it may have to drain.
    node_selector: dict[str, str] = field(default_factory=dict)


def handler_values(args: NodeTerminationHandlerArgs) -> dict:
    """Chart values; every key exists in the chart's values.yaml of the pinned version."""
    return {
        "enableSqsTerminationDraining": True,
        "queueURL": args.queue_url,
        "awsRegion": args.region,
        "nodeTerminationGracePeriod": args.node_grace_seconds,
        # Pods keep their own terminationGracePeriodSeconds (the cloud's notice).
        "podTerminationGracePeriod": -1,
        # Nothing new may land on a node that is going away.
        "taintNode": True,
        "emitKubernetesEvents": True,
        # Instances of other clusters in the account send events too; do not let them pile up.
        "deleteSqsMsgIfNodeNotFound": True,
        # Every node of this cluster is the handler's to drain; the queue is this cluster's own.
        "checkTagBeforeDraining": False,
        "enablePrometheusServer": True,
        # Needs the monitoring stack's CRDs: the release waits for it.
        "serviceMonitor": {"create": True},
        "serviceAccount": {
            "create": True,
            "name": SERVICE_ACCOUNT,
            "annotations": dict(args.service_account_annotations),
        },
        "nodeSelector": dict(args.node_selector),
    }


class NodeTerminationHandler(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        args: NodeTerminationHandlerArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("spot:termination:NodeTerminationHandler", name, None, opts)
        release = k8s.helm.v3.Release(
            f"{name}-release",
            name=CHART.name,
            chart=CHART.chart,
            version=CHART.version,
            repository_opts={"repo": CHART.repository},
            namespace=NAMESPACE,
            atomic=True,
            values=handler_values(args),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.release_name = release.name
        self.register_outputs({"releaseName": release.name})
