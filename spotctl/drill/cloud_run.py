"""`spotctl drill --cloud-run STACK`: take a class's spot nodes away on real capacity (cloud.py),
let the runs recover, and write the drill's report from the cluster's goodput ledger (ledger.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import urlsplit

from rich.console import Console

from components.config import StackConfig
from components.config.loading import read_stack
from spotctl.drill import ledger
from spotctl.drill.cloud import CloudRunError, FisDrill, GkeDrill, Wait
from spotctl.drill.config import GKE_PERCENT, CloudRun


class CloudRunInputError(Exception):
    """A bad input: one line, exit 2."""


def _check(run: CloudRun, dry_run: bool) -> None:
    if not (run.recovery_s >= 0 and run.recovery_s < float("inf")):
        raise CloudRunInputError(f"--recovery-s must be zero or more, not {run.recovery_s:g}")
    if run.prometheus is None:
        if not dry_run:
            raise CloudRunInputError(
                "--prometheus is required with --cloud-run: the URL of the cluster's Prometheus "
                "(e.g. http://localhost:9090 after a port-forward)"
            )
        return
    url = urlsplit(run.prometheus)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise CloudRunInputError(
            f"--prometheus {run.prometheus!r} is not an http(s) URL such as http://localhost:9090"
        )


def drill_of(settings: StackConfig, run: CloudRun) -> FisDrill | GkeDrill:
    """The stack's way to take spot nodes away."""
    if settings.cloud == "aws":
        if run.gpu_class is not None or run.percent is not None:
            raise CloudRunInputError(
                f"--gpu-class and --percent are for GKE stacks; stack {run.stack} sets them in "
                "aws.spot_drill"
            )
        return FisDrill(settings, run.stack)
    gpu_class = run.gpu_class or settings.gpu_classes[0].name
    return GkeDrill(settings, gpu_class, GKE_PERCENT if run.percent is None else run.percent)


def cloud_drill(
    run: CloudRun,
    dry_run: bool,
    json_path: Path | None,
    console: Console,
    program: Path,
    wait: Wait = time.sleep,
) -> dict | None:
    """Dry run: print the plan and touch nothing. Else run the drill and return its report; a
    run not training again at the window's end fails the drill (CloudRunError) once the report
    is written."""
    _check(run, dry_run)
    settings = read_stack(program, run.stack, "--cloud-run")
    try:
        drill = drill_of(settings, run)
    except CloudRunError as exc:  # the stack's settings or the options: bad input
        raise CloudRunInputError(str(exc)) from None
    targets = drill.targets()  # listed once: the plan shows what the run takes
    steps = drill.plan(targets)
    if dry_run:
        console.print(f"[bold]cloud drill of stack {run.stack} ({settings.cloud})[/bold]")
        for number, step in enumerate(steps, 1):
            console.print(f"{number}. {step}")
        console.print(
            f"{len(steps) + 1}. wait {run.recovery_s:g} s for the runs to recover; the window is "
            "from the first interruption to then"
        )
        console.print(
            f"{len(steps) + 2}. ask Prometheus at {run.prometheus or '<--prometheus>'} at the "
            "window's end:"
        )
        for name, promql in ledger.planned_queries().items():
            console.print(f"   {name}: {promql}", soft_wrap=True)
        if json_path is not None:
            console.print(f"{len(steps) + 3}. write the report to {json_path}")
        return None
    console.print(f"cloud drill of stack {run.stack}: {steps[0]}")
    interrupted = drill.run(targets, wait)
    console.print(f"interruptions sent; waiting {run.recovery_s:g} s for the runs to recover")
    end = interrupted.ended_at + run.recovery_s
    wait(max(0.0, end - time.time()))
    runs, sent = ledger.read(ledger.Prometheus(run.prometheus), interrupted.started_at, end)
    report = ledger.report(
        runs,
        sent,
        interrupted.started_at,
        end,
        {
            "stack": run.stack,
            "cloud": settings.cloud,
            "target": interrupted.target,
            "recovery_s": run.recovery_s,
            "prometheus": run.prometheus,
            "interrupted_until": ledger.iso(interrupted.ended_at),
        },
    )
    console.print(ledger.table(report))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
        console.print(f"report: {json_path}")
    stalled = [job["name"] for job in report["jobs"] if not job["recovered"]]
    if stalled:
        raise CloudRunError(f"not training again at the window's end: {', '.join(stalled)}")
    return report
