"""`spotctl preflight`: what only the account knows before a stack's first `pulumi up`, asked with
the operator's own credentials. Every call reads; none writes. One row per check: pass, fail
(with the command that fixes it) or cannot-check (a call the account refused).

The package: `rows` (rows, checks and running them), `aws` (boto3), `gcp` (Google's REST APIs
through `google_api`, with Application Default Credentials). The offline preview answers the
rest of "will the first `pulumi up` succeed" (docs/deploy.md).
"""

from __future__ import annotations

from pathlib import Path

import typer

from spotctl.options import ProgramOption, StackOption


def command(stack: StackOption, program: ProgramOption = None) -> None:
    """Check the account for a stack's first `pulumi up`: read-only calls, one row per check."""
    from components.config.files import ProgramInputError, find_program
    from components.config.loading import read_stack
    from spotctl.preflight.rows import PASS, PreflightError, format_rows, run_checks

    try:
        settings = read_stack(program or find_program(Path.cwd()), stack, "--stack")
    except ProgramInputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        checks, refused = cloud_checks(settings, stack)
        calls = sorted({call for check in checks for call in check.calls})
        typer.echo(f"Preflight of stack {stack!r} ({settings.cloud}, {settings.region})")
        typer.echo(f"Read-only calls, with your credentials: {', '.join(calls)}\n")
        rows = run_checks(checks, refused)
    except PreflightError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(format_rows(rows))
    failed = [row for row in rows if row.status != PASS]
    typer.echo(f"\n{len(rows) - len(failed)} of {len(rows)} checks pass")
    if failed:
        raise typer.Exit(1)


def cloud_checks(settings, stack: str):
    """The stack's cloud's checks and how that cloud's refusals read."""
    if settings.cloud == "aws":
        from functools import cache

        import boto3

        from spotctl.preflight import aws

        session = boto3.session.Session(region_name=settings.region)
        clients = cache(session.client)
        return aws.checks(settings, stack, clients), aws.refused
    from spotctl.preflight import gcp
    from spotctl.preflight.google_api import GoogleApi

    api = GoogleApi.with_default_credentials(settings.gcp.project)
    return gcp.checks(settings, stack, api), gcp.refused
