"""The Grafana dashboard of the platform, as JSON in a ConfigMap that Grafana's sidecar loads.

Sources: the training runtime (spotsafe_*), Kueue (kueue_*, per-flavor usage enabled in its
configuration), kube-state-metrics (node labels `capacity-type` must be on its label allowlist),
and the goodput recordings of the alert rules (GPU utilisation is the cloud's own DCGM
exporter's, in its monitoring service). Savings price the
GPU-hours pods held on spot nodes at the difference between the configured on-demand and spot
GPU-hour prices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

UID = "spot-training"
# Kube-state-metrics names extended resources with underscores.
KSM_GPU = "nvidia_com_gpu"
NODE_CAPACITY = "label_capacity_type"


@dataclass(frozen=True)
class DashboardArgs:
    namespace: str
    on_demand_gpu_hour_usd: float
    spot_gpu_hour_usd: float
    # Labels Grafana's dashboard sidecar selects ConfigMaps by.
    sidecar_labels: dict[str, str] = field(default_factory=lambda: {"grafana_dashboard": "1"})

    def __post_init__(self) -> None:
        if not 0 <= self.spot_gpu_hour_usd <= self.on_demand_gpu_hour_usd:
            raise ValueError(
                "need 0 <= spot_gpu_hour_usd <= on_demand_gpu_hour_usd, got "
                f"{self.spot_gpu_hour_usd} and {self.on_demand_gpu_hour_usd}"
            )


def _panel(
    title: str, targets: list[tuple[str, str]], unit: str, x: int, y: int, kind: str = "timeseries"
) -> dict:
    return {
        "type": kind,
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": 12, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _over_range(record: str, by: str) -> str:
    """The sum of an hourly cost recording over the dashboard's range, one hour at a time."""
    return f"sum by ({by}) (sum_over_time({record}[$__range:1h]))"


def _cost_panels() -> list[dict]:
    """Each team's bill at the stack's GPU-hour prices (docs/goodput.md): what it holds, by
    class and capacity type, and what that time went to; the idle GPUs no team holds."""
    team = "namespace_gpu_class_capacity_type:spot_training"
    by_cause = "namespace_gpu_class_capacity_type_cause:spot_training"
    node_bill = _over_range(
        "gpu_class_capacity_type:spot_training_node_cost_usd:sum1h", "label_gpu_class"
    )
    held = _over_range(f"{team}_cost_usd:sum1h", "label_gpu_class")
    return [
        _panel(
            "GPU-hours per team, class and capacity type (each hour)",
            [
                (
                    f"{team}_gpu_hours:sum1h",
                    "{{namespace}} {{label_gpu_class}} {{label_capacity_type}}",
                )
            ],
            "short",
            0,
            40,
        ),
        _panel(
            "Cost per team, class and capacity type (over the time range)",
            [
                (
                    _over_range(
                        f"{team}_cost_usd:sum1h", "namespace, label_gpu_class, label_capacity_type"
                    ),
                    "{{namespace}} {{label_gpu_class}} {{label_capacity_type}}",
                )
            ],
            "currencyUSD",
            12,
            40,
            kind="bargauge",
        ),
        _panel(
            "Cost per team by what the GPUs did: goodput and badput by cause (over the time range)",
            [
                (
                    _over_range(f"{by_cause}_cost_usd:sum1h", "namespace, cause"),
                    "{{namespace}} {{cause}}",
                )
            ],
            "currencyUSD",
            0,
            48,
            kind="bargauge",
        ),
        _panel(
            "Idle GPUs' cost: the nodes' bill less what teams hold (over the time range)",
            [
                # A class no team held is idle in full.
                (f"{node_bill} - {held} or {node_bill}", "{{label_gpu_class}}")
            ],
            "currencyUSD",
            12,
            48,
            kind="bargauge",
        ),
    ]


def dashboard(args: DashboardArgs) -> dict:
    """The dashboard model (Grafana schema 39)."""
    saving = round(args.on_demand_gpu_hour_usd - args.spot_gpu_hour_usd, 6)
    # GPUs that pods hold on spot nodes, from the nodes' own label: a job that Kueue admitted
    # to a spot flavor but that runs on on-demand (spot was dry) saves nothing.
    spot_gpus = (
        f'sum(kube_pod_container_resource_requests{{resource="{KSM_GPU}"}}'
        f' * on (node) group_left () kube_node_labels{{{NODE_CAPACITY}="spot"}})'
    )
    requested = (
        f'sum by ({NODE_CAPACITY}) (kube_pod_container_resource_requests{{resource="{KSM_GPU}"}}'
        f" * on (node) group_left ({NODE_CAPACITY}) kube_node_labels)"
    )
    allocatable = (
        f'sum by ({NODE_CAPACITY}) (kube_node_status_allocatable{{resource="{KSM_GPU}"}}'
        f" * on (node) group_left ({NODE_CAPACITY}) kube_node_labels)"
    )
    panels = [
        _panel(
            "Interruption rate (share of training pods preempted, last hour)",
            [
                (
                    "namespace:spot_preempted_pods:count1h / namespace:spot_training_pods:count1h",
                    "{{namespace}}",
                )
            ],
            "percentunit",
            0,
            0,
        ),
        _panel(
            "Accelerator idle share (GPUs up that no running pod holds)",
            [
                (
                    "sum(label_capacity_type:spot_training_idle_gpus:sum) / sum("
                    f'kube_node_status_allocatable{{resource="{KSM_GPU}"}})',
                    "idle GPUs",
                )
            ],
            "percentunit",
            12,
            0,
        ),
        _panel(
            "Pool utilisation (GPUs requested / allocatable)",
            [(f"{requested} / {allocatable}", f"{{{{{NODE_CAPACITY}}}}}")],
            "percentunit",
            0,
            8,
        ),
        _panel(
            "Checkpoint age",
            [
                (
                    "max by (namespace, pod) (spotsafe_checkpoint_age_seconds)",
                    "{{namespace}}/{{pod}}",
                )
            ],
            "s",
            12,
            8,
        ),
        _panel(
            "Lost steps (recomputed after resume, last hour)",
            [("namespace:spotsafe_lost_steps:sum1h", "{{namespace}}")],
            "short",
            0,
            16,
        ),
        _panel(
            "Savings against on-demand",
            [
                (f"{spot_gpus} * {saving}", "USD per hour now"),
                (
                    f"sum_over_time({spot_gpus}[$__range:5m]) * {saving} * 5 / 60",
                    "USD over the time range",
                ),
            ],
            "currencyUSD",
            12,
            16,
            kind="stat",
        ),
        _panel(
            "Kueue: pending workloads, and training GPUs on on-demand nodes",
            [
                ("sum by (cluster_queue) (kueue_pending_workloads)", "pending {{cluster_queue}}"),
                ("namespace:training_gpus_on_demand:sum", "on-demand GPUs {{namespace}}"),
            ],
            "short",
            0,
            24,
        ),
        _panel(
            "Goodput per run (share of its time in new training steps, last 6 h)",
            [("namespace_run:spot_training_goodput:ratio6h", "{{namespace}}/{{run}}")],
            "percentunit",
            12,
            24,
        ),
        _panel(
            "Badput by cause (last 6 h)",
            [
                (
                    "sum by (cause) (namespace_run_cause:spot_training_badput_seconds:sum6h)",
                    "{{cause}}",
                )
            ],
            "s",
            0,
            32,
        ),
        _panel(
            "Idle nodes: GPUs up with no running pod",
            [("label_capacity_type:spot_training_idle_gpus:sum", "{{label_capacity_type}}")],
            "short",
            12,
            32,
        ),
        *_cost_panels(),
    ]
    return {
        "uid": UID,
        "title": "Spot training",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "1m",
        "tags": ["spot-training"],
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]
        },
        "panels": [{**panel, "id": i + 1} for i, panel in enumerate(panels)],
    }


class Dashboard(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: DashboardArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("spot:dashboards:Dashboard", name, None, opts)
        k8s.core.v1.ConfigMap(
            f"{name}-configmap",
            metadata={
                "name": "spot-training-dashboard",
                "namespace": args.namespace,
                "labels": {"app.kubernetes.io/part-of": "spot-training", **args.sidecar_labels},
            },
            data={f"{UID}.json": json.dumps(dashboard(args), indent=2, sort_keys=True)},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})
