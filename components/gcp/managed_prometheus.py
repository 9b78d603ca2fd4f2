"""What Managed Service for Prometheus scrapes of the training runtime: a ClusterPodMonitoring
(monitoring.googleapis.com/v1, served by GKE's managed collection) over the training pods of
every team namespace.

The in-cluster Prometheus reads the prometheus-operator PodMonitor (components/k8s/alerts.py);
Managed Prometheus reads only its own resources, and the Cloud Monitoring dashboard's checkpoint
age comes from it. Every local rank's port is an endpoint (a pod without it is no target), and
each series names its run after the pod's Job, as the PodMonitor does. Finished pods are not
scraped: a Spot node's reused pod address must not carry a dead pod's labels.

Checked against prometheus-engine's ClusterPodMonitoring CRD (charts/operator/crds): v1 allows at
most 10 endpoints, each with a port and an interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.alerts import TRAINING_POD_SELECTOR
from components.k8s.jobs import metrics_ports

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# Managed collection's collectors: the DaemonSet `collector` in gmp-system, pod network (no host
# network), so the team namespaces' NetworkPolicy must admit them (prometheus-engine's
# manifests/operator.yaml: the DaemonSet's selector).
COLLECTOR_NAMESPACE = "gmp-system"
COLLECTOR_POD_LABELS = {"app.kubernetes.io/name": "collector"}
COLLECTOR_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": COLLECTOR_NAMESPACE}},
    "podSelector": {"matchLabels": COLLECTOR_POD_LABELS},
}
MAX_ENDPOINTS = 10  # the CRD's spec.endpoints maxItems


@dataclass(frozen=True)
class TrainingPodMonitoringArgs:
    # Local ranks of the largest pod: one per GPU of the stack's largest GPU machine.
    local_ranks: int
    interval_seconds: int = 30

    def __post_init__(self) -> None:
        if not 1 <= self.local_ranks <= MAX_ENDPOINTS:
            raise ValueError(
                f"TrainingPodMonitoringArgs.local_ranks: {self.local_ranks} metrics ports; a "
                f"ClusterPodMonitoring scrapes 1-{MAX_ENDPOINTS}"
            )
        if not 5 <= self.interval_seconds <= 300:
            raise ValueError(
                f"TrainingPodMonitoringArgs.interval_seconds: {self.interval_seconds} is not "
                "within 5-300 s"
            )


class TrainingPodMonitoring(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        args: TrainingPodMonitoringArgs,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("spot:gcp:TrainingPodMonitoring", name, None, opts)
        k8s.apiextensions.CustomResource(
            f"{name}-training-pods",
            api_version="monitoring.googleapis.com/v1",
            kind="ClusterPodMonitoring",
            metadata={"name": "spot-training", "labels": dict(TRAINING_POD_SELECTOR)},
            spec={
                "selector": {"matchLabels": dict(TRAINING_POD_SELECTOR)},
                "endpoints": [
                    {"port": port["name"], "interval": f"{args.interval_seconds}s"}
                    for port in metrics_ports(args.local_ranks)
                ],
                "filterRunning": True,
                "targetLabels": {"fromPod": [{"from": JOB_NAME_LABEL, "to": "run"}]},
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})
