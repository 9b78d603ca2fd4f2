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
