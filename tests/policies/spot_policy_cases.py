"""Builders for previewed resources, shaped as `spotctl.preview` reports them (engine type tokens,
camelCase inputs, dependencies as URNs)."""

from __future__ import annotations

import json

from pack_copy import PACK_DIR  # noqa: F401  (the tests of the pack import it from here)

from spotctl.preview.resources import PreviewResource

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
