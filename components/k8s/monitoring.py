"""The monitoring stack the platform installs: kube-prometheus-stack (the Prometheus operator and
its CRDs, Prometheus, Alertmanager, Grafana, kube-state-metrics, node exporter).

- Prometheus selects every ServiceMonitor, PodMonitor and PrometheusRule in every namespace, so
  no chart's monitor is missed for want of a label.
- Alertmanager sends every alert to the stack's alert targets: the cloud's (AWS: the alert topic,
  email through SNS) and the optional webhook. The heartbeat (Watchdog), which fires by design,
  goes every minute to the cloud's dead man's switch where the cloud has one (AWS: a topic whose
  silence trips a CloudWatch alarm), else nowhere; the inhibitor alert goes nowhere, and nothing
  that always fires inhibits another alert.
- No scrape job for what a managed control plane hides: controller manager, scheduler, etcd and
  kube-proxy (EKS binds its metrics to 127.0.0.1), so no alert waits on a target that can never
  be up.
- Prometheus keeps its data on a persistent volume of the platform's storage class (the
  cluster's default class where the platform names none), for 30 days (RETENTION).
- Grafana's sidecar loads dashboards from ConfigMaps labelled `grafana_dashboard: "1"`.
- Everything but the per-node exporter runs on the stable pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s.objects import helm_release
from components.pools import CAPACITY_TYPE_LABEL, GPU_CLASS_LABEL, POOL_LABEL
from components.versions import KUBE_PROMETHEUS_STACK

NAMESPACE = KUBE_PROMETHEUS_STACK.namespace
# Fixed so the cloud side can bind Alertmanager's identity (it signs its SNS requests).
ALERTMANAGER_SERVICE_ACCOUNT = "alertmanager"
ONCALL = "oncall"
SILENT = "null"
HEARTBEAT = "heartbeat"
# kube-prometheus-stack alerts that fire all the time on purpose (a heartbeat, an inhibitor).
HEARTBEAT_ALERT = "Watchdog"
SILENT_ALERTS = (HEARTBEAT_ALERT, "InfoInhibitor")
# How often Alertmanager repeats the heartbeat; the dead man's switch alarms on its silence.
HEARTBEAT_INTERVAL = "1m"
# Scrape jobs the chart would add for control-plane parts a managed cluster does not expose.
HIDDEN_COMPONENTS = ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy")
# Goodput history kept in Prometheus, and the volume it needs (retentionSize leaves headroom:
# Prometheus deletes the oldest blocks beyond it, before the volume fills).
RETENTION = "30d"
RETENTION_SIZE = "45GB"
VOLUME_GIB = 50
# Node labels kube-state-metrics exports (the dashboard's pool utilisation and the on-demand
# fallback rules group by them).
NODE_LABELS_EXPORTED = (CAPACITY_TYPE_LABEL, POOL_LABEL, GPU_CLASS_LABEL)


@dataclass(frozen=True)
class StorageClassSpec:
    """A StorageClass the platform creates for Prometheus's volume."""

    name: str
    provisioner: str
    parameters: dict[str, str]


@dataclass(frozen=True)
class MonitoringStackArgs:
    # Alertmanager receiver settings that reach the cloud's alert targets, e.g. `sns_configs`.
    receiver: dict[str, Any]
    # A credential: the layer hands it over as a Pulumi secret.
    webhook_url: pulumi.Input[str] | None = None
    # Where the stack's controllers run: the stable pool.
    node_selector: dict[str, str] = field(default_factory=dict)
    # Receiver settings of the cloud's dead man's switch, which the heartbeat goes to.
    heartbeat_receiver: dict[str, Any] | None = None
    # The class of Prometheus's volume; None: the cluster's default class.
    storage_class: StorageClassSpec | None = None

    def __post_init__(self) -> None:
        if not self.receiver and not self.webhook_url:
            raise ValueError(
                "MonitoringStackArgs: no receiver settings and no webhook: alerts would reach "
                "no one"
            )


def alertmanager_config(
    receiver: dict[str, Any],
    webhook_url: pulumi.Input[str] | None,
    heartbeat_receiver: dict[str, Any] | None = None,
) -> dict:
    """Alertmanager's routes and receivers; the chart's defaults fill in the rest (Helm merges
    maps and replaces lists)."""
    oncall = {"name": ONCALL, **receiver}
    if webhook_url:
        oncall["webhook_configs"] = [{"url": webhook_url, "send_resolved": True}]
    routes = [
        {"receiver": SILENT, "matchers": [f'alertname = "{alert}"']}
        for alert in SILENT_ALERTS
        if heartbeat_receiver is None or alert != HEARTBEAT_ALERT
    ]
    receivers = [{"name": SILENT}, oncall]
    if heartbeat_receiver is not None:
        routes.insert(
            0,
            {
                "receiver": HEARTBEAT,
                "matchers": [f'alertname = "{HEARTBEAT_ALERT}"'],
                "group_wait": "0s",
                "group_interval": HEARTBEAT_INTERVAL,
                "repeat_interval": HEARTBEAT_INTERVAL,
            },
        )
        receivers.append({"name": HEARTBEAT, **heartbeat_receiver})
    return {
        "route": {
            "receiver": ONCALL,
            "group_by": ["alertname", "namespace"],
            "routes": routes,
        },
        "receivers": receivers,
        # The chart's rules less its InfoInhibitor ones: that alert fires whenever an info alert
        # is alone in its namespace, so it would silence every info alert for good.
        "inhibit_rules": [
            {
                "source_matchers": ['severity = "critical"'],
                "target_matchers": ['severity =~ "warning|info"'],
                "equal": ["namespace", "alertname"],
            },
            {
                "source_matchers": ['severity = "warning"'],
                "target_matchers": ['severity = "info"'],
                "equal": ["namespace", "alertname"],
            },
        ],
    }


def stack_values(args: MonitoringStackArgs) -> dict:
    """Chart values; every key outside the subcharts exists in the chart's values.yaml."""
    on_stable = {"nodeSelector": dict(args.node_selector)}
    # Without Helm's release-label selectors, Prometheus selects every monitor and rule.
    kinds = ("serviceMonitor", "podMonitor", "rule")
    every_object = {f"{kind}SelectorNilUsesHelmValues": False for kind in kinds}
    claim = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{VOLUME_GIB}Gi"}},
    }
    if args.storage_class is not None:
        claim["storageClassName"] = args.storage_class.name
    storage = {
        "retention": RETENTION,
        "retentionSize": RETENTION_SIZE,
        "storageSpec": {"volumeClaimTemplate": {"spec": claim}},
    }
    return {
        "prometheus": {"prometheusSpec": {**every_object, **on_stable, **storage}},
        "alertmanager": {
            "config": alertmanager_config(args.receiver, args.webhook_url, args.heartbeat_receiver),
            "serviceAccount": {"create": True, "name": ALERTMANAGER_SERVICE_ACCOUNT},
            "alertmanagerSpec": on_stable,
        },
        "prometheusOperator": on_stable,
        "grafana": on_stable,
        "kube-state-metrics": {
            **on_stable,
            "metricLabelsAllowlist": [f"nodes=[{','.join(NODE_LABELS_EXPORTED)}]"],
        },
        **{component: {"enabled": False} for component in HIDDEN_COMPONENTS},
    }


class MonitoringStack(pulumi.ComponentResource):
    """The `monitoring` namespace and the kube-prometheus-stack release in it. `release` installs
    the monitoring.coreos.com CRDs: every PrometheusRule, ServiceMonitor and PodMonitor, and every
    release that creates one, waits for it."""

    namespace: k8s.core.v1.Namespace
    release: k8s.helm.v3.Release

    def __init__(
        self, name: str, args: MonitoringStackArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:monitoring:MonitoringStack", name, None, opts)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={
                "name": NAMESPACE,
                "labels": {"app.kubernetes.io/part-of": "spot-training"},
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        needs: list[pulumi.Resource] = [self.namespace]
        if args.storage_class is not None:
            needs.append(
                k8s.storage.v1.StorageClass(
                    f"{name}-storage-class",
                    metadata={"name": args.storage_class.name},
                    provisioner=args.storage_class.provisioner,
                    parameters=args.storage_class.parameters,
                    # A volume is created where its pod is scheduled (in that pod's zone).
                    volume_binding_mode="WaitForFirstConsumer",
                    allow_volume_expansion=True,
                    reclaim_policy="Retain",
                    opts=pulumi.ResourceOptions(parent=self),
                )
            )
        self.release = helm_release(
            f"{name}-release",
            KUBE_PROMETHEUS_STACK,
            stack_values(args),
            pulumi.ResourceOptions(parent=self, depends_on=needs),
            # Ready once Prometheus, Alertmanager and Grafana run: longer than Helm's default.
            timeout_seconds=900,
        )
        self.register_outputs({"namespace": NAMESPACE, "releaseName": self.release.name})
