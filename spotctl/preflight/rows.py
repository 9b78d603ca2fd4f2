"""What a preflight check answers: rows of pass / fail / cannot-check, each failure with the
command that fixes it, and the read-only calls each check makes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

PASS, FAIL, CANNOT_CHECK = "pass", "fail", "cannot-check"


class PreflightError(Exception):
    """The account cannot be asked at all (no credentials, no such project): one line, no
    rows."""


@dataclass(frozen=True)
class Row:
    check: str
    status: str  # PASS, FAIL or CANNOT_CHECK
    detail: str
    fix: str | None = None  # the command (or config change) that fixes a failure


@dataclass(frozen=True)
class Check:
    name: str
    calls: tuple[str, ...]  # the read-only API calls it makes, e.g. "sts:GetCallerIdentity"
    run: Callable[[], list[Row]]


def format_rows(rows: list[Row]) -> str:
    width = max(len(row.check) for row in rows)
    lines = []
    for row in rows:
        lines.append(f"{row.status.upper():<13} {row.check:<{width}}  {row.detail}")
        if row.fix:
            lines.append(f"{'':<13} {'':<{width}}  fix: {row.fix}")
    return "\n".join(lines)


def run_checks(checks: list[Check], refused: Callable[[Exception], str | None]) -> list[Row]:
    """Every check's rows. A call the account refuses (`refused` names why, e.g. a denied
    permission) makes that check one cannot-check row; anything else propagates."""
    rows = []
    for check in checks:
        try:
            rows += check.run()
        except PreflightError:
            raise
        except Exception as exc:
            reason = refused(exc)
            if reason is None:
                raise
            rows.append(Row(check.name, CANNOT_CHECK, reason))
    return rows
