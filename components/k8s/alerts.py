"""Alert rules as a PrometheusRule, and the PodMonitor that scrapes the training runtime.

The rules are the promtool-tested file `rules/spot-training.rules.yaml`; each alert's
`runbook_url` there is a repository path, deployed under the stack's runbook base URL. A first
group records the stack's GPU-hour prices, which the file's cost rules read (prices.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.k8s.jobs import METRICS_PORT_NAMES

RULES_FILE = Path(__file__).parent / "rules" / "spot-training.rules.yaml"
TRAINING_POD_SELECTOR = {"app.kubernetes.io/part-of": "spot-training"}


def alert_groups(runbook_base_url: str) -> list[dict]:
    """The rule groups with absolute runbook links."""
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    base = runbook_base_url.rstrip("/")
    for group in groups:
        for rule in group["rules"]:
            annotations = rule.get("annotations", {})
            if "runbook_url" in annotations:
                annotations["runbook_url"] = f"{base}/{annotations['runbook_url']}"
    return groups


@dataclass(frozen=True)
class AlertRulesArgs:
    namespace: str
    runbook_base_url: str
    team_namespaces: tuple[str, ...]
    # The price recordings (prices.price_group), evaluated before the file's groups.
    price_group: dict


class AlertRules(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: AlertRulesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:alerts:AlertRules", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = {"app.kubernetes.io/part-of": "spot-training"}
        k8s.apiextensions.CustomResource(
            f"{name}-rules",
            api_version="monitoring.coreos.com/v1",
            kind="PrometheusRule",
            metadata={"name": "spot-training", "namespace": args.namespace, "labels": labels},
            spec={"groups": [args.price_group, *alert_groups(args.runbook_base_url)]},
            opts=child,
        )
        k8s.apiextensions.CustomResource(
            f"{name}-training-pods",
            api_version="monitoring.coreos.com/v1",
            kind="PodMonitor",
            metadata={"name": "spot-training", "namespace": args.namespace, "labels": labels},
            spec={
                "namespaceSelector": {"matchNames": list(args.team_namespaces)},
                "selector": {"matchLabels": TRAINING_POD_SELECTOR},
                "podMetricsEndpoints": [
                    {
                        "interval": "30s",
                        "relabelings": [
                            # Every local rank's port (metrics, metrics-1, ...) is a target.
                            {
                                "sourceLabels": ["__meta_kubernetes_pod_container_port_name"],
                                "regex": METRICS_PORT_NAMES,
                                "action": "keep",
                            },
                            # Every series names its run (the Job), across the run's pods.
                            {
                                "sourceLabels": [
                                    "__meta_kubernetes_pod_label_batch_kubernetes_io_job_name"
                                ],
                                "targetLabel": "run",
                            },
                        ],
                    }
                ],
            },
            opts=child,
        )
        self.register_outputs({})
