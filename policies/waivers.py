"""Waivers: violations the team accepts for a while, written down in `waivers.yaml` with a reason,
an owner and an expiry.

Every policy reports through `honoured`: a violation that an unexpired waiver covers is kept
aside in the run's ledger, for the policies of `waiver_rules` to report. This module imports
nothing of the pack, so `spotctl review` can load it from any copy of the pack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from fnmatch import fnmatchcase
from pathlib import Path

import pulumi
import yaml

WAIVERS_FILE = Path(__file__).with_name("waivers.yaml")
FIELDS = ("policy", "stack", "resource", "reason", "owner", "expires")


class WaiverError(ValueError):
    """waivers.yaml cannot be read as waivers; the message names the field."""


@dataclass(frozen=True)
class Waiver:
    policy: str  # a policy name, exactly
    stack: str  # a stack name, or a glob such as "*"
    resource: str  # a resource's logical name, or a glob; "" for a stack-wide finding
    reason: str
    owner: str
    expires: date  # the last day it holds

    def covers(self, policy: str, stack: str, resource: str) -> bool:
        return (
            policy == self.policy
            and fnmatchcase(stack, self.stack)
            and fnmatchcase(resource, self.resource)
        )

    def expired(self, today: date) -> bool:
        return today > self.expires

    def describe(self) -> str:
        return f"waiver of {self.policy} for {self.stack}/{self.resource or '(stack)'}"


def load_waivers(path: Path = WAIVERS_FILE) -> list[Waiver]:
    if not path.is_file():
        return []
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise WaiverError(f"{path.name}: not valid YAML ({exc})") from None
    entries = document.get("waivers") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise WaiverError(f"{path.name}: waivers must be a list")
    return [_waiver(entry, f"{path.name}: waivers[{i}]") for i, entry in enumerate(entries)]


def _waiver(entry, where: str) -> Waiver:
    if not isinstance(entry, dict):
        raise WaiverError(f"{where}: must be a mapping of {', '.join(FIELDS)}")
    unknown = sorted(set(entry) - set(FIELDS))
    if unknown:
        raise WaiverError(f"{where}.{unknown[0]}: unknown field (fields: {', '.join(FIELDS)})")
    for name in FIELDS:
        value = entry.get(name)
        if name == "expires":
            if not isinstance(value, date):
                raise WaiverError(f"{where}.expires: must be a date (YYYY-MM-DD), got {value!r}")
        elif not isinstance(value, str) or (not value.strip() and name != "resource"):
            raise WaiverError(f"{where}.{name}: must be a non-empty string")
    return Waiver(**{name: entry[name] for name in FIELDS})


@dataclass(frozen=True)
class Waived:
    waiver: Waiver
    urn: str
    message: str


WAIVERS = load_waivers()
# What this run's policies left to the waivers: findings kept aside, and the waivers they used.
LEDGER: list[Waived] = []


def today() -> date:
    return datetime.now(UTC).date()


def resource_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1] if urn else ""


def honoured(policy: str, report_violation: Callable, default_urn: str) -> Callable:
    """report_violation, but a finding that an unexpired waiver covers is kept aside."""
    stack = pulumi.get_stack()

    def report(message: str, urn: str | None = None) -> None:
        where = urn or default_urn
        covering = [
            w
            for w in WAIVERS
            if w.covers(policy, stack, resource_name(where)) and not w.expired(today())
        ]
        if covering:
            LEDGER.append(Waived(covering[0], where, message))
        elif urn is None:
            report_violation(message)
        else:
            report_violation(message, urn)

    return report
