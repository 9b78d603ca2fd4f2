"""`spotctl status`: how a run (or each run of a team) is doing, from the cluster's Prometheus:
its attempts and recoveries, the step each resumed from, the steps lost, goodput and badput by
cause, GPU-hours and cost by capacity type, and whether it trains now (runs.py).

Exit status: 0 with the status, 1 when Prometheus cannot answer, 2 on a bad input (an unknown
run among them, with the runs that exist).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from spotctl.outputs import OutputError, output_file

TOKEN_ENV = "SPOTCTL_PROMETHEUS_TOKEN"
"""A bearer token for Prometheus, when its endpoint asks for one."""
DURATION = re.compile(r"[1-9][0-9]*[smhdwy]")


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def command(
    prometheus: Annotated[
        str,
        typer.Option(
            "--prometheus",
            help="URL of the cluster's Prometheus (a port-forward, or Managed Service for "
            f"Prometheus's query frontend); a bearer token, if it needs one, in ${TOKEN_ENV}.",
        ),
    ],
    run: Annotated[
        str | None, typer.Option("--run", help="The run: its Job's name (the series' run label).")
    ] = None,
    team: Annotated[
        str | None, typer.Option("--team", help="The team: its namespace; alone, all its runs.")
    ] = None,
    since: Annotated[
        str, typer.Option("--since", help="How far back the runs' series are read (30m, 7d, ...).")
    ] = "7d",
    fresh: Annotated[
        float,
        typer.Option(
            "--fresh",
            help="Seconds within which the step must have moved for a run to be training now "
            "(default: four scrapes of the PodMonitor's 30 s).",
        ),
    ] = 120.0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the status as JSON to this file.")
    ] = None,
) -> None:
    """A run's attempts, recoveries, lost steps, goodput and cost, and whether it trains now."""
    url = urlsplit(prometheus)
    if url.scheme not in ("http", "https") or not url.hostname:
        _fail(f"--prometheus {prometheus!r} is not an http(s) URL such as http://localhost:9090")
    if run is None and team is None:
        _fail("give --run RUN (its Job's name), --team NAMESPACE, or both")
    if not DURATION.fullmatch(since):
        _fail(f"--since {since!r} is not a Prometheus duration such as 30m, 12h or 7d")
    if not 0 < fresh < float("inf"):
        _fail(f"--fresh must be a positive number of seconds, not {fresh:g}")
    if json_path is not None:
        try:
            output_file(json_path, "--json")
        except OutputError as exc:
            _fail(str(exc))

    from rich.console import Console

    from spotctl.drill.ledger import Prometheus, PrometheusError
    from spotctl.status.runs import Unknown, read
    from spotctl.status.table import tables

    client = Prometheus(prometheus, token=os.environ.get(TOKEN_ENV))
    at = time.time()
    try:
        runs, sent = read(client, team, run, since, fresh, at)
    except PrometheusError as exc:
        _fail(str(exc), 1)
    except Unknown as exc:
        _fail(str(exc))
    console = Console()
    for table in tables(runs):
        console.print(table)
    if json_path is not None:
        status = {"prometheus": prometheus, "at": at, "since": since, "queries": sent, "runs": runs}
        json_path.write_text(json.dumps(status, indent=2, allow_nan=False) + "\n")
        console.print(f"status: {json_path}")
