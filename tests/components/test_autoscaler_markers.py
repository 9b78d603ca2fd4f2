"""Running training pods are never moved to shrink the cluster, on either cloud: each Job template
carries its provisioner's marker. Sources: Karpenter, "Disruption" (`karpenter.sh/do-not-disrupt:
"true"` on a pod blocks voluntary disruption of its node); Cluster Autoscaler FAQ and GKE's
cluster autoscaler docs (`cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` on a pod keeps
its node from being scaled down)."""

from __future__ import annotations

import pytest
import yaml

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
MARKERS = {
    "prod": {"karpenter.sh/do-not-disrupt": "true"},
    "gcp-prod": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
}


def job_templates(preview) -> list[dict]:
    """Every Job in the stack's template ConfigMaps."""
    return [
        document
        for config_map in preview.of_type(CONFIG_MAP)
        for text in (config_map.inputs.get("data") or {}).values()
        for document in yaml.safe_load_all(text)
        if isinstance(document, dict) and document.get("kind") == "Job"
    ]


@pytest.mark.parametrize("stack", sorted(MARKERS))
def test_every_training_pod_carries_its_providers_do_not_disrupt_marker(stack_preview, stack):
    templates = job_templates(stack_preview(stack))
    assert len(templates) >= 4, "single- and multi-node templates of every team"
    for job in templates:
        annotations = job["spec"]["template"]["metadata"].get("annotations", {})
        assert annotations == MARKERS[stack], job["metadata"]["name"]
