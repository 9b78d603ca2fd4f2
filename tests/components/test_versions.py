"""One table of pinned versions (components/versions.py): the doc is generated from it, and every
file that must repeat a pin agrees with it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
from stack_files import REPO_ROOT, STACKS, charts_of

from components.versions import (
    ADDON_NAMESPACES,
    CHARTS,
    KUBERNETES_RELEASES,
    KUBERNETES_VERSION,
    PROVIDERS,
    RESERVED_NAMESPACES,
    TRAINING_IMAGE_BASE,
)
from spotctl.preview.resources import preview_program


def test_the_doc_table_is_generated_from_the_table():
    check = subprocess.run(
        [sys.executable, "-m", "components.versions", "--check"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr


def test_providers_are_pinned_as_pyproject_installs_them():
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"
    ]
    installed = {}
    for requirement in dependencies:
        name, spec = re.match(r"^([A-Za-z0-9_.-]+)(.*)$", requirement).groups()
        installed[name] = spec
    assert {name: installed.get(name) for name in PROVIDERS} == PROVIDERS


def test_the_training_image_base_is_the_dockerfiles():
    dockerfile = (REPO_ROOT / "training-image" / "Dockerfile").read_text()
    assert re.findall(r"^FROM\s+(\S+)", dockerfile, re.MULTILINE) == [TRAINING_IMAGE_BASE]


def test_every_pinned_kubernetes_version_can_be_validated_and_has_every_addon():
    assert KUBERNETES_VERSION in KUBERNETES_RELEASES
    for version, release in KUBERNETES_RELEASES.items():
        assert release.version == version
        assert f"{version}.0" in kubernetes_validate.utils.all_versions()
        assert set(release.addons) == set(ADDON_NAMESPACES)
        assert release.standard_support_ends < release.extended_support_ends
        for addon_version in release.addons.values():
            assert re.fullmatch(r"v\d+\.\d+\.\d+-eksbuild\.\d+", addon_version), addon_version


# Charts whose CRDs or values come in another chart's schemas: karpenter-crd's CRDs are Karpenter's.
SCHEMAS_OF = {"karpenter-crd": "karpenter"}


def test_charts_match_the_schemas_they_are_checked_against(shared_schemas: Path):
    folders = {p.name for p in shared_schemas.iterdir()}
    for chart in CHARTS:
        name = SCHEMAS_OF.get(chart.name, chart.name)
        matching = [f for f in folders if f.startswith(f"{name}-")]
        assert matching, f"no schemas for {chart.name} in {shared_schemas}"
        assert any(chart.version in folder for folder in matching), (chart, matching)


@pytest.mark.parametrize("stack", STACKS)
def test_every_release_installs_a_pinned_chart(stack):
    releases = [
        r.inputs
        for r in preview_program(REPO_ROOT, stack)
        if r.type == "kubernetes:helm.sh/v3:Release"
    ]
    charts = charts_of(stack)
    pinned = {
        (c.name, c.chart, c.version, c.repository, c.namespace) for c in CHARTS if c.name in charts
    }
    found = {
        (
            r["name"],
            r["chart"],
            r["version"],
            r.get("repositoryOpts", {}).get("repo"),
            r["namespace"],
        )
        for r in releases
    }
    assert found == pinned


def test_reserved_namespaces_cover_the_system_and_every_installed_component():
    reserved = set(RESERVED_NAMESPACES)
    assert {"kube-system", "kube-public", "kube-node-lease", "default"} <= reserved
    assert {chart.namespace for chart in CHARTS} <= reserved
    assert set(ADDON_NAMESPACES.values()) <= reserved
