"""Tiny programs of their own, for previewing one GCP component or engine answer at a time."""

from __future__ import annotations

from pathlib import Path


def tiny_program(root: Path, main: str) -> Path:
    """A program of its own with an empty `test` stack."""
    (root / "Pulumi.yaml").write_text("name: t\nruntime: python\n")
    (root / "Pulumi.test.yaml").write_text("config: {}\n")
    (root / "__main__.py").write_text(main)
    return root
