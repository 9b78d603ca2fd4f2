"""Policies that also say why they exist (for the README table), with thresholds in config_schema,
and pulumi-policy's metadata: a severity, the steps that fix a violation, and the URL of the
README section that explains the policy.

Each check is called as `check(args, report_violation, settings)`, where `settings` holds the
configured thresholds over the schema defaults: the Pulumi CLI fills the defaults in before it
calls Configure, and a pack started without configuration behaves the same. A violation that a
waiver in waivers.yaml covers is reported as waived instead (`policies.waivers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ResourceValidationPolicy,
    Severity,
    StackValidationPolicy,
)

from policies.waivers import honoured

MANDATORY = EnforcementLevel.MANDATORY
ADVISORY = EnforcementLevel.ADVISORY

Check = Callable[[Any, Callable[..., None], Mapping[str, Any]], None]

# Where the pack's README is browsable, beside the runbooks the stacks' alerts link to
# (alerts.runbook_base_url); a fork sets its own. Each policy's section is anchored by its name.
DOCS_URL = (
    "https://git.ml-platform.internal/platform/spot-training-blueprint/blob/main/policies/README.md"
)
# A mandatory rule guards what must never happen; an advisory one what wears the platform down.
SEVERITY = {MANDATORY: Severity.HIGH, ADVISORY: Severity.MEDIUM}


class _Explained:
    """The construction both kinds of rule share: the check behind waivers and configured
    thresholds, and the reason it exists. Mixed in before the Pulumi policy class it builds."""

    def __init__(
        self,
        name: str,
        what: str,
        why: str,
        check: Check,
        level: EnforcementLevel = ADVISORY,
        config: Mapping[str, dict] | None = None,
        waivable: bool = True,
        *,
        fix: str,
    ) -> None:
        config = config or {}
        defaults = {key: schema["default"] for key, schema in config.items()}

        def validate(args, report_violation) -> None:
            if waivable:
                report_violation = honoured(name, report_violation, getattr(args, "urn", ""))
            check(args, report_violation, {**defaults, **(args.get_config() or {})})

        super().__init__(
            name=name,
            description=what,
            validate=validate,
            enforcement_level=level,
            config_schema=PolicyConfigSchema(properties=dict(config)) if config else None,
            severity=SEVERITY[level],
            remediation_steps=fix,
            url=f"{DOCS_URL}#{name}",
        )
        self.why = why


class ResourceRule(_Explained, ResourceValidationPolicy):
    """A check of one resource at a time (the engine's Analyze call)."""


class StackRule(_Explained, StackValidationPolicy):
    """A check over the whole resource graph (the engine's AnalyzeStack call), for rules that
    span resources: in pulumi-aws v7 a bucket's versioning, lifecycle, encryption and access
    settings are separate resources."""
