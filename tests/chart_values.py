"""Helm chart values as Helm treats them: the keys a chart defines, and the values it renders
with (the chart's defaults with the release's values merged over them)."""

from __future__ import annotations

import copy

# Maps of Kubernetes labels in chart values: any key goes, whatever the chart's default holds.
LABEL_MAPS = ("nodeSelector",)


def unknown_keys(values: dict, chart: dict, prefix: str = ""):
    """Keys set in `values` that the chart does not define; free-form maps ({}, or label maps
    such as nodeSelector) take any key."""
    for key, value in values.items():
        if key not in chart:
            yield prefix + key
        elif (
            isinstance(value, dict)
            and isinstance(chart[key], dict)
            and chart[key]
            and key not in LABEL_MAPS
        ):
            yield from unknown_keys(value, chart[key], f"{prefix}{key}.")


def merged(defaults: dict, values: dict) -> dict:
    """Helm's merge: maps merge key by key, anything else (lists included) is replaced."""
    result = copy.deepcopy(defaults)
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result
