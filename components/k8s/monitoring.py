"""The monitoring stack the platform installs: kube-prometheus-stack (the Prometheus operator and
its CRDs, Prometheus, Alertmanager, Grafana, kube-state-metrics, node exporter).

- Prometheus selects every ServiceMonitor, PodMonitor and PrometheusRule in every namespace, so
  no chart's monitor is missed for want of a label.
- Alertmanager sends every alert to the stack's alert targets: the cloud's (AWS: the alert topic,
  email through SNS) and the optional webhook. Only the stack's heartbeat and inhibitor alerts,
  which fire by design, go nowhere, and nothing that always fires inhibits another alert.
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
# kube-prometheus-stack alerts that fire all the time on purpose (a heartbeat, an inhibitor).
SILENT_ALERTS = ("Watchdog", "InfoInhibitor")
# Node labels kube-state-metrics exports (the dashboard's pool utilisation and the on-demand
# fallback rules group by them).
NODE_LABELS_EXPORTED = (CAPACITY_TYPE_LABEL, POOL_LABEL, GPU_CLASS_LABEL)


@dataclass(frozen=True)
class MonitoringStackArgs:
    # Alertmanager receiver settings that reach the cloud's alert targets, e.g. `sns_configs`.
    receiver: dict[str, Any]
    webhook_url: str | None = None
    # Where the stack's controllers run: the stable pool.
    node_selector: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.receiver and not self.webhook_url:
            raise ValueError(
                "MonitoringStackArgs: no receiver settings and no webhook: alerts would reach "
                "no one"
            )


def alertmanager_config(receiver: dict[str, Any], webhook_url: str | None) -> dict:
    """Alertmanager's routes and receivers; the chart's defaults fill in the rest (Helm merges
    maps and replaces lists)."""
    oncall = {"name": ONCALL, **receiver}
    if webhook_url:
        oncall["webhook_configs"] = [{"url": webhook_url, "send_resolved": True}]
    return {
        "route": {
            "receiver": ONCALL,
            "group_by": ["alertname", "namespace"],
            "routes": [
                {"receiver": SILENT, "matchers": [f'alertname = "{alert}"']}
                for alert in SILENT_ALERTS
            ],
        },
        "receivers": [{"name": SILENT}, oncall],
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
    return {
        "prometheus": {"prometheusSpec": {**every_object, **on_stable}},
        "alertmanager": {
            "config": alertmanager_config(args.receiver, args.webhook_url),
            "serviceAccount": {"create": True, "name": ALERTMANAGER_SERVICE_ACCOUNT},
            "alertmanagerSpec": on_stable,
        },
        "prometheusOperator": on_stable,
        "grafana": on_stable,
        "kube-state-metrics": {
            **on_stable,
            "metricLabelsAllowlist": [f"nodes=[{','.join(NODE_LABELS_EXPORTED)}]"],
        },
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
        self.release = helm_release(
            f"{name}-release",
            KUBE_PROMETHEUS_STACK,
            stack_values(args),
            pulumi.ResourceOptions(parent=self, depends_on=[self.namespace]),
            # Ready once Prometheus, Alertmanager and Grafana run: longer than Helm's default.
            timeout_seconds=900,
        )
        self.register_outputs({"namespace": NAMESPACE, "releaseName": self.release.name})
