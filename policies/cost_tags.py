"""Cost allocation: every taggable AWS resource carries the team, env and capacity-type tags, and
every labelled GCP resource the same keys as labels, set on the resource or through the
provider's defaults (AWS `defaultTags`, GCP `defaultLabels`)."""

from __future__ import annotations

import importlib
import inspect
import json
from functools import cache

from policies.inputs import dig
from policies.rule import ADVISORY, ResourceRule

# Per provider package: its SDK module, and the resource arguments that carry cost keys.
COST_ARGUMENTS = {
    "aws": ("pulumi_aws", ("tags",)),
    "gcp": ("pulumi_gcp", ("labels", "resource_labels", "user_labels")),
}
LABEL_PROPS = {"labels": "labels", "resource_labels": "resourceLabels", "user_labels": "userLabels"}
# A GKE node pool labels its VMs through nodeConfig.resourceLabels.
GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
REQUIRED = {
    "requiredTags": {
        "type": "array",
        "items": {"type": "string"},
        "default": ["team", "env", "capacity-type"],
    }
}


@cache
def cost_arguments(resource_type: str) -> tuple[str, ...]:
    """The arguments of the resource class behind a type token (<package>:<module>/<file>:<Class>)
    that carry cost keys; empty when it has none. Provider SDKs load their modules lazily, so
    this imports only the one class."""
    package, _, rest = resource_type.partition(":")
    module, _, class_name = rest.partition(":")
    if package not in COST_ARGUMENTS or not class_name:
        return ()
    sdk, wanted = COST_ARGUMENTS[package]
    module = module.split("/")[0]
    try:
        namespace = importlib.import_module(sdk if module == "index" else f"{sdk}.{module}")
        resource_class = getattr(namespace, class_name)
    except (ImportError, AttributeError):
        return ()
    parameters = inspect.signature(resource_class._internal_init).parameters
    return tuple(name for name in wanted if name in parameters)


def taggable(resource_type: str) -> bool:
    return "tags" in cost_arguments(resource_type)


def _provider_defaults(args, prop: str, key: str | None) -> dict:
    if args.provider is None:
        return {}
    defaults = args.provider.props.get(prop)
    if isinstance(defaults, str):  # provider config may arrive JSON-encoded
        try:
            defaults = json.loads(defaults)
        except json.JSONDecodeError:
            return {}
    return dict((dig(defaults, key) if key else defaults) or {})


def _missing(settings, found: dict) -> list[str]:
    return [key for key in settings["requiredTags"] if not found.get(key)]


def _check_cost_tags(args, report_violation, settings) -> None:
    if not taggable(args.resource_type):
        return
    tags = {**_provider_defaults(args, "defaultTags", "tags"), **dict(args.props.get("tags") or {})}
    missing = _missing(settings, tags)
    if missing:
        report_violation(f"'{args.name}' is missing cost tag(s): {', '.join(missing)}")


def _check_cost_labels(args, report_violation, settings) -> None:
    if args.resource_type == GKE_NODE_POOL:
        labels = dict(dig(args.props, "nodeConfig", "resourceLabels", default={}))
    elif args.resource_type.startswith("gcp:") and cost_arguments(args.resource_type):
        labels = {}
        for argument in cost_arguments(args.resource_type):
            # The provider's defaultLabels reach `labels` and `resource_labels`, not Cloud
            # Monitoring's `user_labels`.
            if argument != "user_labels":
                labels.update(_provider_defaults(args, "defaultLabels", None))
            labels.update(dict(args.props.get(LABEL_PROPS[argument]) or {}))
    else:
        return
    missing = _missing(settings, labels)
    if missing:
        report_violation(f"'{args.name}' is missing cost label(s): {', '.join(missing)}")


POLICIES = [
    ResourceRule(
        "aws-cost-tags-present",
        "Taggable AWS resources carry the requiredTags cost tags (resource tags or provider "
        "defaultTags).",
        "Spot savings and idle accelerators can only be attributed per team, environment and "
        "capacity type if every resource says which it belongs to.",
        _check_cost_tags,
        ADVISORY,
        config=REQUIRED,
        fix=(
            "Set the missing tags on the resource, or as defaultTags on its explicit aws.Provider "
            "(components/tags.py builds them from cost_tags in the stack config)."
        ),
    ),
    ResourceRule(
        "gcp-cost-labels-present",
        "Labelled GCP resources carry the requiredTags keys as labels (labels, resourceLabels, "
        "userLabels, a node pool's nodeConfig.resourceLabels, or provider defaultLabels).",
        "GCP billing splits cost by label: without them spot savings and idle accelerators "
        "cannot be attributed to a team, environment or capacity type.",
        _check_cost_labels,
        ADVISORY,
        config=REQUIRED,
        fix=(
            "Set the missing labels on the resource (labels, resourceLabels, userLabels or "
            "nodeConfig.resourceLabels), or as defaultLabels on its explicit gcp.Provider."
        ),
    ),
]
