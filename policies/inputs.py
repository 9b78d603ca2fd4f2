"""Reading resource inputs as the analyzer receives them: engine camelCase names, values wrapped in
pulumi_policy's unknown-checking proxies (Mappings and Sequences, not dicts and lists)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the checkov checks import this without pulumi-policy
    from pulumi_policy import PolicyResource


def dig(value: Any, *path: str | int, default: Any = None) -> Any:
    """`value[path[0]][path[1]]...`, or `default` as soon as a step is missing."""
    for step in path:
        if isinstance(step, int):
            if not is_list(value) or not -len(value) <= step < len(value):
                return default
        elif not isinstance(value, Mapping) or step not in value:
            return default
        value = value[step]
    return default if value is None else value


def is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def as_list(value: Any) -> list:
    """A list from a list, a single value (IAM's "Action": "s3:GetObject") or nothing."""
    if value is None:
        return []
    return list(value) if is_list(value) else [value]


def policy_document(value: Any) -> Mapping:
    """An IAM / bucket policy document, whether it arrives as a JSON string or as an object."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, Mapping) else {}


def statements(document: Any) -> list[Mapping]:
    return [
        s for s in as_list(policy_document(document).get("Statement")) if isinstance(s, Mapping)
    ]


def of_type(resources: Iterable[PolicyResource], *types: str) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type in types]


def refers_to(resource: PolicyResource, prop: str, target: PolicyResource) -> bool:
    """Whether `resource.props[prop]` points at `target`.

    The engine reports which resources feed each property (property dependencies); a harness that
    only knows a resource's dependencies still names the target. Without either, fall back to the
    value: a literal bucket or role name matches the target's own name input.
    """
    if prop in resource.property_dependencies:
        return target in resource.property_dependencies[prop]
    if target in resource.dependencies:
        return True
    value = resource.props.get(prop)
    return value is not None and value in (target.props.get("bucket"), target.props.get("name"))
