"""What the API server does with a custom resource beyond its JSON Schema: it fills in the schema's
defaults, then evaluates the CEL rules (`x-kubernetes-validations`) of every field present.

Defaulting (Kubernetes "Defaulting" of structural schemas): a missing property that has a
`default` gets it, in every object present, and a default that is an object is defaulted in turn;
nothing is invented where the parent object is absent.

Validation rules: `self` is the field's value; a rule that refers to `oldSelf` is a transition
rule, checked only on update, so on create (what a render is) it is skipped, as the API server
does. The rules run on a maintained CEL library (common-expression-language) with the Kubernetes
extension functions that the pinned CRDs use and CEL itself lacks: the regex library's `find`
and the strings library's `split` (k8s.io/apiserver/pkg/cel/library).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import cel

RULES = "x-kubernetes-validations"
# What an expression the API server could not evaluate raises here (a missing key or index:
# LookupError).
CEL_ERRORS = (RuntimeError, ValueError, TypeError, LookupError)


def with_defaults(schema: dict, value: Any) -> Any:
    """`value` with the schema's defaults filled in, as the API server stores it."""
    value = copy.deepcopy(value)
    _default(schema, value)
    return value


def _default(schema: dict, value: Any) -> None:
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                _default(prop, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in set(value) - set(schema.get("properties", {})):
                _default(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(schema["items"], item)


def _find(text: str, pattern: str) -> str:
    """Kubernetes' `<string>.find(<regex>)`: the first match, or the empty string."""
    match = re.search(pattern, text)
    return match.group(0) if match else ""


def _split(text: str, separator: str, limit: int = -1) -> list[str]:
    """Kubernetes' `<string>.split(<separator>[, <limit>])` (limit < 0: no limit; 0: none)."""
    if limit == 0:
        return []
    return text.split(separator, limit - 1 if limit > 0 else -1)


EXTENSIONS = {"find": _find, "split": _split}


@cache
def _program(rule: str) -> cel.Program:
    return cel.compile(rule)


def evaluate(expression: str, variables: dict[str, Any]) -> Any:
    """The CEL expression's value with these variables and the Kubernetes extensions; raises
    RuntimeError, ValueError, TypeError or KeyError where the API server reports an error."""
    context = cel.Context()
    for name, value in variables.items():
        context.add_variable(name, value)
    for name, function in EXTENSIONS.items():
        context.add_function(name, function)
    return _program(expression).execute(context)


def _holds(rule: str, value: Any) -> bool:
    return evaluate(rule, {"self": value}) is True


def rule_problems(schema: dict, value: Any, path: str = "") -> Iterator[str]:
    """'<field path>: <message>' for each rule that a field present fails (or cannot evaluate)."""
    for rule in schema.get(RULES, []):
        if "oldSelf" in rule["rule"]:
            continue  # a transition rule: checked on update only
        try:
            holds = _holds(rule["rule"], value)
        except CEL_ERRORS as exc:
            yield f"{path or '(root)'}: rule {rule['rule']!r} cannot be evaluated: {exc}"
            continue
        if not holds:
            message = rule.get("message") or f"failed rule: {rule['rule']}"
            yield f"{path or '(root)'}: {message}"
    if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        return
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name in value:
                yield from rule_problems(prop, value[name], f"{path}.{name}" if path else name)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in set(value) - set(schema.get("properties", {})):
                yield from rule_problems(extra, value[key], f"{path}.{key}" if path else key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from rule_problems(schema["items"], item, f"{path}[{index}]")
