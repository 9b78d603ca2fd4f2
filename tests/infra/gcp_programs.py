"""Programs for previewing the GCP half: a copy of its program with one stack, or a tiny one."""

from __future__ import annotations

from pathlib import Path

import yaml
from stack_files import GCP_PROGRAM


def gcp_program_copy(root: Path, stack: str, values: dict) -> Path:
    """A copy of the GCP program whose only stack has the given config values."""
    (root / "Pulumi.yaml").write_text((GCP_PROGRAM / "Pulumi.yaml").read_text())
    (root / "__main__.py").symlink_to(GCP_PROGRAM / "__main__.py")
    (root / "stacks").mkdir()
    config = {f"spot-training:{key}": value for key, value in values.items()}
    (root / "stacks" / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    return root


def tiny_program(root: Path, main: str) -> Path:
    """A program of its own with an empty `test` stack."""
    (root / "Pulumi.yaml").write_text("name: t\nruntime: python\n")
    (root / "Pulumi.test.yaml").write_text("config: {}\n")
    (root / "__main__.py").write_text(main)
    return root
