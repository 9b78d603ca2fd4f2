"""Copies of the policy pack, as `pulumi policy publish` uploads it, for tests in every area."""

from __future__ import annotations

import shutil
from pathlib import Path

from stack_files import REPO_ROOT

PACK_DIR = REPO_ROOT / "policies"


def pack_copy(destination: Path, waivers: str | None = None, venv: Path | None = None) -> Path:
    """The pack copied to `destination` (as `pulumi policy publish` uploads it: the directory
    alone), with these waivers.yaml contents and a virtualenv of its own (default: the
    repository's)."""
    shutil.copytree(PACK_DIR, destination, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    if waivers is not None:
        (destination / "waivers.yaml").write_text(waivers)
    (destination / "venv").symlink_to(venv or PACK_DIR.parent / ".venv")
    return destination
