"""`spotctl status` on the console: per run, a summary and its attempts."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from spotctl.status.runs import RUN_CAUSES


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:,.2f}"


def _step(value: int | None) -> str:
    return "-" if value is None else str(value)


def summary(run: dict[str, Any]) -> Table:
    g = run["goodput"]
    state = "training now" if run["training_now"] else "not training"
    table = Table(
        title=f"{run['namespace']}/{run['run']}: {state}, step {run['step']}",
        show_header=False,
    )
    table.add_column("what")
    table.add_column("value", overflow="fold")
    table.add_row("recoveries", str(run["recoveries"]))
    resumed = ", ".join(_step(step) for step in run["resumed_from"]) or "-"
    table.add_row("resumed from steps", resumed)
    table.add_row("lost steps", str(run["lost_steps"]))
    table.add_row("goodput", f"{g['ratio']:.1%} of {g['run_s']:.0f} s")
    for cause in RUN_CAUSES:
        seconds = g["badput_s"][cause]
        share = seconds / g["run_s"] if g["run_s"] else 0.0
        table.add_row(f"badput: {cause.replace('_', ' ')}", f"{share:.1%} ({seconds:.0f} s)")
    for kind, entry in run["capacity"].items():
        table.add_row(
            f"GPU-hours on {kind}", f"{entry['gpu_hours']:.3f} ({_usd(entry['cost_usd'])})"
        )
    table.add_row("cost", _usd(run["cost_usd"]))
    return table


def attempts(run: dict[str, Any]) -> Table:
    table = Table(title=f"attempts of {run['namespace']}/{run['run']}")
    for column in ("attempt", "pods", "capacity", "resumed from", "reached", "lost steps"):
        table.add_column(column, overflow="fold")
    table.add_column("notices")
    table.add_column("goodput")
    for a in run["attempts"]:
        total = a["goodput_s"] + sum(a["badput_s"].values())
        notices = ", ".join(f"{source} ×{n}" for source, n in sorted(a["notices"].items()))
        table.add_row(
            _step(a["attempt"]),
            ", ".join(a["pods"]),
            ", ".join(a["capacity_types"]),
            "start" if a["resumed_from"] is None else str(a["resumed_from"]),
            _step(a["reached_step"]),
            _step(a["lost_steps"]),
            notices or "-",
            f"{a['goodput_s'] / total:.1%}" if total else "-",
        )
    table.caption = "lost steps: reached by earlier attempts, computed again by this one"
    return table


def tables(runs: list[dict[str, Any]]) -> list[Table]:
    return [table for run in runs for table in (summary(run), attempts(run))]
