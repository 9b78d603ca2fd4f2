"""Builders for previewed resources, shaped as `spotctl.preview` reports them (engine type tokens,
camelCase inputs, dependencies as URNs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from spotctl.preview import PreviewResource

PACK_DIR = Path(__file__).resolve().parents[2] / "policies"

TAGS = {"team": "vision", "env": "test", "capacity-type": "spot"}


def resource(type_: str, name: str, inputs: dict, *, deps=(), custom=True, provider=None):
    return PreviewResource(
        urn=f"urn:pulumi:test::spot-training::{type_}::{name}",
        type=type_,
        name=name,
        parent=None,
        custom=custom,
        inputs=inputs,
        dependencies=[d.urn for d in deps],
        provider=provider,
    )


def document(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def pack_copy(destination: Path, waivers: str | None = None, venv: Path | None = None) -> Path:
    """The pack copied to `destination` (as `pulumi policy publish` uploads it: the directory
    alone), with these waivers.yaml contents and a virtualenv of its own (default: the
    repository's)."""
    shutil.copytree(PACK_DIR, destination, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    if waivers is not None:
        (destination / "waivers.yaml").write_text(waivers)
    (destination / "venv").symlink_to(venv or PACK_DIR.parent / ".venv")
    return destination
