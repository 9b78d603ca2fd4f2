"""`spotctl review`: the quarterly review, offline. Per stack the policy pack's verdict and each
threshold beside the stack's value; the waivers and their expiry; every pinned version with its
end of support; runbook freshness and alert <-> runbook coverage; the quarter's drill reports; each
team's cost and its lost work's; and a verdict per GPU class from the provider's spot interruption
bands.

Writes DIR/review.html (self-contained), DIR/review.md and DIR/review.json. Exit status: 3 on a
mandatory problem (an expired waiver, a version past its end of support, a mandatory policy
violation), 2 when the review cannot run as given, 0 otherwise.
"""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path
from typing import Annotated

import typer

from spotctl.options import PolicyPackConfigOption
from spotctl.outputs import ForceOption, OutputDirectory, OutputError

QUARTER = re.compile(r"(\d{4})Q([1-4])")


def command(
    out: Annotated[Path, typer.Option("--out", help="Directory for review.html/.md/.json.")],
    quarter: Annotated[
        str | None, typer.Option("--quarter", help="The quarter reviewed, e.g. 2026Q4.")
    ] = None,
    on: Annotated[
        str | None,
        typer.Option(
            "--date", help="Review date (YYYY-MM-DD; default today): expiries count from it."
        ),
    ] = None,
    drill_reports: Annotated[
        Path | None,
        typer.Option(
            "--drill-reports",
            help="Directory of the quarter's `spotctl drill --json` reports (the cloud drill's in "
            "its cloud/ folder).",
        ),
    ] = None,
    costs: Annotated[
        Path | None,
        typer.Option(
            "--costs",
            help="The quarter's cost per team: Prometheus's JSON answer to the query in "
            "docs/goodput.md.",
        ),
    ] = None,
    policy_pack: Annotated[
        Path | None, typer.Option("--policy-pack", help="The policy pack (default: policies).")
    ] = None,
    policy_pack_config: PolicyPackConfigOption = None,
    provider_data: Annotated[
        Path | None,
        typer.Option(
            "--provider-data", help="Spot interruption bands (default: <pack>/provider-data.yaml)."
        ),
    ] = None,
    force: ForceOption = False,
) -> None:
    """The quarterly review report: exit 3 on a mandatory problem."""
    from spotctl.preview.resources import PreviewError
    from spotctl.progress import Progress

    try:
        day = date.fromisoformat(on) if on else date.today()
    except ValueError:
        _fail(f"--date {on!r}: not a date (YYYY-MM-DD)")
    if quarter is not None and not QUARTER.fullmatch(quarter):
        _fail(f"--quarter {quarter!r}: not a quarter (e.g. 2026Q4)")
    if drill_reports is not None and not drill_reports.is_dir():
        _fail(f"--drill-reports {drill_reports}: not a directory")
    try:
        target = OutputDirectory(out, "--out", force)
    except OutputError as exc:
        _fail(str(exc))
    with Progress("review") as progress:
        progress.update("inputs", "loading the policy analyzer, then reading the review's inputs")
        from spotctl.preview.analyzer import PolicyPackError
        from spotctl.review.collect import REPO, ReviewError, collect, quarter_of
        from spotctl.review.report import markdown, page

        try:
            review = collect(
                day=day,
                quarter=quarter or quarter_of(day),
                pack=policy_pack or REPO / "policies",
                policy_config=policy_pack_config,
                drill_reports=drill_reports,
                costs=costs,
                provider_data=provider_data,
                progress=progress,
            )
        except (ReviewError, PolicyPackError, PreviewError) as exc:
            progress.close()
            _fail(str(exc))
        progress.update("report", f"writing {out}/review.html, review.md, review.json")
    document = review.to_json()
    target.clear()
    (out / "review.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    (out / "review.md").write_text(markdown(document))
    (out / "review.html").write_text(page(document))
    target.record(out / name for name in ("review.json", "review.md", "review.html"))
    typer.echo(
        f"Review {review.quarter}: {len(review.mandatory)} mandatory problems, "
        f"{len(review.flags)} flags; {out}/review.html, review.md, review.json"
    )
    for problem in review.mandatory:
        typer.echo(f"  MANDATORY: {problem}")
    if review.mandatory:
        raise typer.Exit(3)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
