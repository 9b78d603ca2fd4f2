"""The waivers' own policies: a violation a waiver covers is reported as waived
(`waived-violation`, advisory) instead of at its policy's level; an expired waiver covers nothing
and is itself a mandatory violation (`waiver-not-expired`); a waiver that covered nothing in this
run is stale (`waiver-still-needed`). Stack policies run after every resource has been analysed,
so these, last in the pack, see the whole run's ledger; the last one clears it for the next run.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import pulumi

from policies.rule import ADVISORY, MANDATORY, StackRule
from policies.waivers import LEDGER, WAIVERS, Waiver, today


def _stack_waivers() -> list[Waiver]:
    stack = pulumi.get_stack()
    return [w for w in WAIVERS if fnmatchcase(stack, w.stack)]


def _check_not_expired(_args, report_violation, _settings) -> None:
    for waiver in _stack_waivers():
        if waiver.expired(today()):
            report_violation(
                f"{waiver.describe()} (owner {waiver.owner}) expired on {waiver.expires}: fix "
                "the violation, or renew the waiver with a new expiry and reason"
            )


def _check_still_needed(_args, report_violation, _settings) -> None:
    used = {entry.waiver for entry in LEDGER}
    for waiver in _stack_waivers():
        if waiver not in used and not waiver.expired(today()):
            report_violation(
                f"{waiver.describe()} (owner {waiver.owner}) is stale: the policy no longer "
                "fires there; remove the waiver"
            )


def _report_waived(_args, report_violation, _settings) -> None:
    for entry in LEDGER:
        waiver = entry.waiver
        report_violation(
            f"{waiver.policy} waived until {waiver.expires} ({waiver.owner}: {waiver.reason}): "
            f"{entry.message}",
            entry.urn or None,
        )
    LEDGER.clear()


WAIVED = "waived-violation"
POLICIES = [
    StackRule(
        "waiver-not-expired",
        "Every waiver in waivers.yaml that applies to the stack is within its expiry date.",
        "A waiver is a decision with a date to revisit it; past that date the violation it "
        "covered stands again, and nobody has looked at it.",
        _check_not_expired,
        MANDATORY,
        waivable=False,
        fix=(
            "Fix the violation the waiver covered and delete the waiver from "
            "policies/waivers.yaml, or renew it with a new expiry and the reason it still holds."
        ),
    ),
    StackRule(
        "waiver-still-needed",
        "Every unexpired waiver that applies to the stack covers a violation.",
        "A waiver for a policy that no longer fires would silently cover the next, unrelated "
        "violation of the same policy.",
        _check_still_needed,
        ADVISORY,
        waivable=False,
        fix="Delete the waiver from policies/waivers.yaml: the violation it covered is gone.",
    ),
    # Last: it reads and clears the run's ledger.
    StackRule(
        WAIVED,
        "Reports each violation that an unexpired waiver covers, with the waiver's owner, reason "
        "and expiry.",
        "A waived violation stays visible on every preview until it is fixed or expires.",
        _report_waived,
        ADVISORY,
        waivable=False,
        fix=(
            "Fix the violation before the waiver's expiry, then delete the waiver from "
            "policies/waivers.yaml."
        ),
    ),
]
