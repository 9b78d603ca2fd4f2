"""The repository's stack files, as tests in every area read them."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
STACKS = sorted(p.name.split(".")[1] for p in (REPO_ROOT / "stacks").glob("Pulumi.*.yaml"))


def stack_values(stack: str) -> dict:
    """The stack file's config, keyed by schema field (as __main__.py decodes it)."""
    document = yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return {key.split(":", 1)[1]: value for key, value in document["config"].items()}


# The GCP half's own program and stacks, until the repository's program dispatches to it.
GCP_PROGRAM = REPO_ROOT / "tests" / "infra" / "programs" / "gcp"
GCP_STACKS = sorted(p.name.split(".")[1] for p in (GCP_PROGRAM / "stacks").glob("Pulumi.*.yaml"))


def gcp_stack_values(stack: str) -> dict:
    """A GCP stack file's config, keyed by schema field."""
    document = yaml.safe_load((GCP_PROGRAM / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return {key.split(":", 1)[1]: value for key, value in document["config"].items()}
