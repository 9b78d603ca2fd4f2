"""The runbooks speak of the Kubernetes the clusters run: the kubectl reference their commands are
checked against (runbooks/cli-reference.yaml) and the node versions their sample outputs show are
of the minor version a new cluster is pinned to (components/versions.py)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from components.versions import GKE_VERSION, KUBERNETES_VERSION

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
# A row of `kubectl get nodes`: NAME STATUS ROLES AGE VERSION, the kubelet's version.
NODE_ROW = re.compile(r"\sReady\s+\S+\s+\S+\s+v(\d+\.\d+)\.\d+\s")


def test_the_kubectl_reference_is_of_the_pinned_minor() -> None:
    source = yaml.safe_load((RUNBOOKS / "cli-reference.yaml").read_text())["kubectl"]["source"]
    [minor] = re.findall(r"kubectl v(\d+\.\d+) reference", source)
    assert minor == KUBERNETES_VERSION == GKE_VERSION


def test_sample_node_versions_are_of_the_pinned_minor() -> None:
    shown = {
        (path.name, version)
        for path in sorted(RUNBOOKS.glob("**/*.md"))
        for version in NODE_ROW.findall(path.read_text())
    }
    assert shown, "no node version shown in the runbooks' sample outputs"
    assert {version for _, version in shown} == {KUBERNETES_VERSION}, sorted(shown)
