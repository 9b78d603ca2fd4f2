"""Cost allocation: every taggable AWS resource carries the team, env and capacity-type tags, set on
the resource or through the provider's defaultTags."""

from __future__ import annotations

import importlib
import inspect
import json
from functools import cache

from policies.inputs import dig
from policies.rule import ADVISORY, ResourceRule


@cache
def taggable(resource_type: str) -> bool:
    """Whether the pulumi-aws resource behind a type token (aws:<module>/<file>:<Class>) accepts
    `tags`. pulumi-aws loads its modules lazily, so this imports only the one class."""
    package, _, rest = resource_type.partition(":")
    module, _, class_name = rest.partition(":")
    if package != "aws" or not class_name:
        return False
    module = module.split("/")[0]
    try:
        namespace = importlib.import_module(
            "pulumi_aws" if module == "index" else f"pulumi_aws.{module}"
        )
        resource_class = getattr(namespace, class_name)
    except (ImportError, AttributeError):
        return False
    return "tags" in inspect.signature(resource_class._internal_init).parameters


def _provider_default_tags(args) -> dict:
    if args.provider is None:
        return {}
    default_tags = args.provider.props.get("defaultTags")
    if isinstance(default_tags, str):  # provider config may arrive JSON-encoded
        try:
            default_tags = json.loads(default_tags)
        except json.JSONDecodeError:
            return {}
    return dict(dig(default_tags, "tags", default={}))


def _check_cost_tags(args, report_violation, settings) -> None:
    if not taggable(args.resource_type):
        return
    tags = {**_provider_default_tags(args), **dict(args.props.get("tags") or {})}
    missing = [key for key in settings["requiredTags"] if not tags.get(key)]
    if missing:
        report_violation(f"'{args.name}' is missing cost tag(s): {', '.join(missing)}")


POLICIES = [
    ResourceRule(
        "aws-cost-tags-present",
        "Taggable AWS resources carry the requiredTags cost tags (resource tags or provider "
        "defaultTags).",
        "Spot savings and idle accelerators can only be attributed per team, environment and "
        "capacity type if every resource says which it belongs to.",
        _check_cost_tags,
        ADVISORY,
        config={
            "requiredTags": {
                "type": "array",
                "items": {"type": "string"},
                "default": ["team", "env", "capacity-type"],
            }
        },
    ),
]
