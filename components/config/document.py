"""The stack config as a document, before the schema reads it.

Pulumi hands the program every config key of the stack as a string, namespaced
(`spot-training:teams`); structured values arrive JSON-encoded. `decode_values` turns that map
into the raw document `load_config` (components/config/loading.py) validates (the region, and the
GCP project, from the cloud provider's own keys, where Pulumi users set them), and
`document_problems` refuses what no schema field could hold but would break the code that reads
it: keys that are not strings, integers the engine cannot carry, nesting without end, text that is
not Unicode.
Problems are (location, message) pairs; a location is a tuple of keys and indexes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

# Namespaces a stack may set besides the project's own: the providers the program uses and
# Pulumi's own settings.
PROVIDER_NAMESPACES = ("aws", "gcp", "kubernetes", "pulumi")
# Where Pulumi users set a cloud's region and project: the provider's own keys, by cloud, and the
# document field each fills (the project's own key of that field, where a stack sets it too, must
# agree).
PROVIDER_FIELDS = {
    "aws": {"aws:region": ("region",)},
    "gcp": {"gcp:region": ("region",), "gcp:project": ("gcp", "project")},
}
# Deeper than any field of the schema, far below Python's recursion limit.
MAX_DEPTH = 16
# The engine carries numbers as IEEE doubles: larger integers would not arrive as written.
MAX_INTEGER = 2**53 - 1
# What an encrypted (`secure:`) value reads as where it cannot be decrypted (offline): Pulumi's own
# rendering of a secret it does not show.
SECRET = "[secret]"

Location = tuple[str | int, ...]
Problem = tuple[Location, str]


def decode_values(
    values: Mapping[str, str], project: str, string_fields: Iterable[str]
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The project's config keys as a document: field -> value. A field the schema types as a
    string keeps its text as written (`environment: "true"` stays a string); any other value is
    JSON where it parses as JSON. A key of an unknown namespace is a problem: a misspelt project
    name would otherwise drop the whole setting. Problems name the key as the stack file does."""
    document: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    strings = set(string_fields)
    for key, text in sorted(values.items()):
        namespace, _, field = key.partition(":")
        if namespace != project:
            if namespace not in PROVIDER_NAMESPACES:
                known = ", ".join(f"{n}:" for n in (project, *PROVIDER_NAMESPACES))
                problems.append((key, f"unknown namespace {namespace!r} (known: {known})"))
            continue
        if field in strings:
            document[field] = text
            continue
        try:
            document[field] = json.loads(text)
        except json.JSONDecodeError:
            document[field] = text  # a plain string such as `region: us-east-1`
        except (ValueError, RecursionError) as exc:
            problems.append((key, f"cannot be read: {_reason(exc)}"))
    return document, problems + _provider_fields(document, values, project)


def _provider_fields(
    document: dict[str, Any], values: Mapping[str, str], project: str
) -> list[tuple[str, str]]:
    """Fills the document's region (and GCP project) from the cloud provider's keys; a project
    key that says otherwise is a problem naming both, never silently one of them."""
    problems = []
    cloud = document.get("cloud")
    for key, path in PROVIDER_FIELDS.get(cloud if isinstance(cloud, str) else "", {}).items():
        *sections, field = path
        holder = document
        for section in sections:
            holder = holder.get(section) if isinstance(holder, dict) else None
        if key not in values or not isinstance(holder, dict):
            continue
        own = holder.setdefault(field, values[key])
        if own != values[key]:
            problems.append(
                (
                    f"{project}:{'.'.join(path)}",
                    f"{own!r} conflicts with {key} {values[key]!r}: set it once, in {key}",
                )
            )
    return problems


def document_problems(value: Any, location: Location = ()) -> list[Problem]:
    """What in a decoded document no field may hold, each at its location."""
    if len(location) > MAX_DEPTH:
        return [(location[:MAX_DEPTH], f"nested deeper than {MAX_DEPTH} levels")]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int) and abs(value) > MAX_INTEGER:
        return [(location, f"integer out of range (at most {MAX_INTEGER} in size)")]
    if isinstance(value, str) and not _unicode(value):
        return [(location, "text that is not valid Unicode")]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in document_problems(item, (*location, i))]
    if isinstance(value, dict):
        problems = []
        for key, item in value.items():
            if not isinstance(key, str) or not _unicode(key):
                problems.append((location, f"key {key!r} is not a string"))
            else:
                problems += document_problems(item, (*location, key))
        return problems
    return []


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).split(";")[0]
