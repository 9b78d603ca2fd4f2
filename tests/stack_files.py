"""The repository's stack files, as tests in every area read them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from components.aws.platform import efa_instance_types
from components.config import load_config
from components.config.files import load_project, stack_names
from components.config.loading import stack_document
from components.versions import (
    CHARTS,
    EFA_DEVICE_PLUGIN,
    KARPENTER,
    KARPENTER_CRD,
    NVIDIA_DEVICE_PLUGIN,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
STACKS = stack_names(REPO_ROOT, load_project(REPO_ROOT))
SPOTCTL = str(Path(sys.executable).with_name("spotctl"))


def spotctl_preview(program: Path, stack: str, *args: str) -> subprocess.CompletedProcess:
    """`spotctl preview` of a program's stack, run as a user runs it."""
    return subprocess.run(
        [SPOTCTL, "preview", "--stack", stack, "--program", str(program), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def stack_values(stack: str) -> dict:
    """The stack's config, keyed by schema field, as the program gets it."""
    return stack_document(REPO_ROOT, stack)


def _cloud(stack: str) -> str:
    return stack_values(stack)["cloud"]


AWS_STACKS = [stack for stack in STACKS if _cloud(stack) == "aws"]
GCP_STACKS = [stack for stack in STACKS if _cloud(stack) == "gcp"]


def charts_of(stack: str) -> set[str]:
    """The charts a stack installs: on GKE, no Karpenter, and the device plugin comes with GKE's
    GPU nodes; on EKS, the EFA device plugin where a GPU class has EFA types."""
    config = load_config(stack_values(stack))
    charts = {chart.name for chart in CHARTS}
    if config.cloud == "gcp":
        charts -= {
            c.name for c in (KARPENTER_CRD, KARPENTER, NVIDIA_DEVICE_PLUGIN, EFA_DEVICE_PLUGIN)
        }
    elif not efa_instance_types(config):
        charts.discard(EFA_DEVICE_PLUGIN.name)
    return charts


def value_paths(tree, prefix=()):
    """Every path into a config tree of dicts and lists, the root's empty path first."""
    yield prefix
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from value_paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            yield from value_paths(value, (*prefix, index))
