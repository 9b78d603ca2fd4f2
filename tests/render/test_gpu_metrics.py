"""GPU metrics on every GPU node of every class: the GpuIdleHigh alarm and the idle panel read the
DCGM exporter of the CloudWatch observability add-on, which runs only where its DaemonSet's
required node affinity lets it.

Reference: the amazon-cloudwatch-observability chart 4.1.0 (the add-on v4.1.0-eksbuild.1 the
project pins), shared/schemas/amazon-cloudwatch-observability-chart-4.1.0/values.yaml:
`dcgmExporter.affinity` lists the instance types it schedules on (p5.48xlarge, not p5.4xlarge).
The add-on's configuration values are merged over the chart's the way Helm merges them.
"""

from __future__ import annotations

import json

import pytest
import yaml
from chart_values import merged
from stack_files import AWS_STACKS

from components.k8s.gpus import INSTANCE_TYPE_LABEL
from spotctl.render.manifests import render
from spotctl.render.scheduling import NodeShape, fits

ADDON = "amazon-cloudwatch-observability"
CHART = "amazon-cloudwatch-observability-chart-4.1.0"


def dcgm_exporter(resources, shared_schemas) -> dict:
    """The exporter's pod placement, as the add-on renders it with the stack's configuration."""
    chart = yaml.safe_load((shared_schemas / CHART / "values.yaml").read_text())
    (addon,) = [
        r for r in resources if r.type == "aws:eks/addon:Addon" and r.inputs["addonName"] == ADDON
    ]
    values = merged(chart, json.loads(addon.inputs.get("configurationValues") or "{}"))
    exporter = values["dcgmExporter"]
    return {
        "nodeSelector": exporter.get("nodeSelector"),
        "affinity": exporter["affinity"],
        # The chart's DaemonSets take the top-level tolerations unless their own are set.
        "tolerations": exporter.get("tolerations") or values["tolerations"],
    }


def unmetered(nodes: list[NodeShape], exporter: dict) -> list[str]:
    return sorted(
        {n.labels[INSTANCE_TYPE_LABEL] for n in nodes if n.gpus and not fits(exporter, n)}
    )


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_the_dcgm_exporter_runs_on_every_gpu_type_of_every_class(
    stack, stack_previews, shared_schemas
):
    resources = stack_previews(stack)
    nodes = render(resources).nodes
    assert any(n.gpus for n in nodes)
    assert unmetered(nodes, dcgm_exporter(resources, shared_schemas)) == []


def test_the_charts_own_affinity_misses_p5_4xlarge(stack_previews, shared_schemas):
    """Without the stack's affinity, prod's H100 class has a type with no GPU metrics."""
    nodes = render(stack_previews("prod")).nodes
    chart = yaml.safe_load((shared_schemas / CHART / "values.yaml").read_text())
    exporter = {"affinity": chart["dcgmExporter"]["affinity"], "tolerations": chart["tolerations"]}
    assert unmetered(nodes, exporter) == ["p5.4xlarge"]
