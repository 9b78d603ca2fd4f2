"""The review as Markdown and as one self-contained HTML page, its charts inlined as PNG data
URIs (matplotlib), from the document `collect` builds."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from typing import Any

from spotctl.review.collect import WARN_DAYS

# (title, section path, columns): the tables both formats show.
TABLES = (
    (
        "Waivers",
        ("waivers",),
        ("policy", "stack", "resource", "owner", "expires", "days_left", "status", "reason"),
    ),
    (
        "Admission mode per team namespace",
        ("admission", "namespaces"),
        ("stack", "namespace", "mode", "waived_rules"),
    ),
    (
        "Admission waivers",
        ("admission", "waivers"),
        ("stack", "namespace", "rule", "owner", "expires", "days_left", "status", "reason"),
    ),
    (
        "Pinned versions",
        ("versions",),
        ("component", "kind", "version", "end_of_support", "days_left", "status", "source"),
    ),
    (
        "Runbook freshness",
        ("runbooks", "freshness"),
        ("runbook", "last_reviewed", "age_days", "status"),
    ),
    ("Alerts and their runbooks", ("runbooks", "alerts"), ("source", "alert", "runbook", "exists")),
    (
        "Drill reports",
        ("drills",),
        (
            "report",
            "kind",
            "duration_s",
            "interruptions",
            "jobs",
            "finished",
            "weights_match",
            "saving_share",
            "idle_share",
            "goodput",
        ),
    ),
    (
        "Cost per team (USD; goodput and badput from the runtime's ledger)",
        ("costs",),
        (
            "team",
            "paid_usd",
            "goodput_usd",
            "lost_work_usd",
            "other_badput_usd",
            "lost_work_share",
        ),
    ),
    (
        "Spot interruption bands per GPU class",
        ("provider_data", "pools"),
        ("stack", "pool", "region", "bands", "verdict"),
    ),
)


def _rows(document: dict, path: tuple[str, ...]) -> list[dict]:
    for key in path:
        document = document.get(key, {})
    return document or []


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v or '?'}" for k, v in value.items())
    return "" if value is None else str(value)


def _stack_tables(document: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    tables = []
    for stack in document.get("stacks", []):
        counts = ", ".join(f"{len(v)} {level}" for level, v in stack["violations"].items())
        violations = [
            [level, v["policy"], v["resource"], v["message"]]
            for level, found in stack["violations"].items()
            for v in found
        ]
        tables.append(
            (
                f"Stack {stack['stack']}: {stack['verdict']} ({stack['resources']} resources; "
                f"{counts})",
                ["level", "policy", "resource", "message"],
                violations,
            )
        )
        rows = [
            [
                r["policy"],
                r["setting"],
                r["resource"],
                f"{r['bound']} {r['threshold']:g}",
                f"{r['actual']:g}",
                f"{r['headroom']:+g}",
            ]
            for r in stack["headroom"]
        ]
        tables.append(
            (
                f"Stack {stack['stack']}: thresholds and headroom",
                ["policy", "setting", "resource", "threshold", "actual", "headroom"],
                rows,
            )
        )
    return tables


def all_tables(document: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    tables = _stack_tables(document)
    for title, path, columns in TABLES:
        rows = [[_cell(row.get(c)) for c in columns] for row in _rows(document, path)]
        tables.append((title, list(columns), rows))
    return tables


def markdown(document: dict) -> str:
    lines = [f"# Quarterly review {document['quarter']} ({document['date']})", ""]
    lines += _summary(document, "- {}")
    for title, columns, rows in all_tables(document):
        lines += ["", f"## {title}", ""]
        if not rows:
            lines.append("None.")
            continue
        lines.append("| " + " | ".join(columns) + " |")
        lines.append("|" + "---|" * len(columns))
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    unlinked = document.get("runbooks", {}).get("unlinked", [])
    if unlinked:
        lines += ["", "Runbooks no alert links: " + ", ".join(unlinked)]
    data = document.get("provider_data", {})
    if data:
        lines += ["", f"Provider data: {data['source']}, read {data['date']}."]
    return "\n".join(lines) + "\n"


def _summary(document: dict, item: str) -> list[str]:
    mandatory, flags = document["mandatory"], document["flags"]
    lines = [
        f"**Result: {'FAIL' if mandatory else 'pass'}** ({len(mandatory)} mandatory "
        f"problems, {len(flags)} flags)",
        "",
    ]
    lines += [item.format(f"MANDATORY: {m}") for m in mandatory]
    lines += [item.format(f) for f in flags]
    return lines


@dataclass(frozen=True)
class Chart:
    """Horizontal bars, one per label; `line`, where set, is drawn as a dashed threshold."""

    title: str
    labels: list[str]
    values: list[float]
    unit: str
    line: float | None = None


def chart_data(document: dict) -> list[Chart]:
    """What each chart plots, titled by what its bars measure."""
    made = []
    versions = [v for v in document.get("versions", []) if v["days_left"] is not None]
    if versions:
        made.append(
            Chart(
                "Support left per pinned version",
                [f"{v['component']} {v['version']}" for v in versions],
                [v["days_left"] for v in versions],
                "days",
                WARN_DAYS,
            )
        )
    rows = [(s["stack"], r) for s in document.get("stacks", []) for r in s["headroom"]]
    if rows:
        made.append(
            Chart(
                "Headroom to each policy threshold",
                [f"{stack}: {r['resource']} {r['setting']}" for stack, r in rows],
                [100 * r["headroom"] / (r["threshold"] or 1) for _, r in rows],
                "headroom, % of the threshold (negative: over the line)",
            )
        )
    fresh = document.get("runbooks", {}).get("freshness", [])
    if fresh:
        made.append(
            Chart(
                f"Days left until each runbook is due for review (every {WARN_DAYS} days)",
                [r["runbook"] for r in fresh],
                [WARN_DAYS - r["age_days"] for r in fresh],
                "days left (negative: overdue)",
            )
        )
    drills = [d for d in document.get("drills", []) if d["saving_share"] is not None]
    if drills:
        made.append(
            Chart(
                "Drill savings against on-demand",
                [d["report"] for d in drills],
                [d["saving_share"] for d in drills],
                "share",
            )
        )
    return made


def figure(chart: Chart):
    """The chart drawn; each bar carries its value, so a bar of zero shows too."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    drawn, axes = pyplot.subplots(figsize=(10, 0.3 * len(chart.labels) + 1.4), dpi=90)
    line = chart.line
    colors = [
        "#c0392b" if v < 0 else "#e67e22" if line and v <= line else "#27ae60" for v in chart.values
    ]
    bars = axes.barh(chart.labels, chart.values, color=colors)
    axes.bar_label(bars, labels=[f"{v:.3g}" for v in chart.values], padding=3, fontsize=8)
    if line:
        axes.axvline(line, color="#555", linestyle="--", linewidth=1)
    axes.axvline(0, color="#000", linewidth=0.8)
    axes.set_xlabel(chart.unit)
    axes.set_title(chart.title)
    axes.invert_yaxis()
    drawn.tight_layout()
    return drawn


def charts(document: dict) -> list[tuple[str, str]]:
    """(title, data URI) of each chart."""
    made = []
    for chart in chart_data(document):
        drawn = figure(chart)
        buffer = io.BytesIO()
        drawn.savefig(buffer, format="png")
        from matplotlib import pyplot  # loaded by `figure`, on the Agg backend

        pyplot.close(drawn)
        made.append(
            (chart.title, "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode())
        )
    return made


STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
.fail { color: #c0392b; } .pass { color: #27ae60; }
img { display: block; margin: 1em 0; max-width: 100%; }
"""


def page(document: dict) -> str:
    """One HTML page with everything inlined: no request leaves it."""
    e = html.escape
    result = "fail" if document["mandatory"] else "pass"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Quarterly review {e(document['quarter'])}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Quarterly review {e(document['quarter'])} ({e(document['date'])})</h1>",
        f'<p class="{result}"><strong>Result: {result.upper()}</strong> '
        f"({len(document['mandatory'])} mandatory problems, {len(document['flags'])} flags)</p>",
        "<ul>",
        *(f'<li class="fail">MANDATORY: {e(m)}</li>' for m in document["mandatory"]),
        *(f"<li>{e(f)}</li>" for f in document["flags"]),
        "</ul>",
    ]
    for title, uri in charts(document):
        parts += [f"<h2>{e(title)}</h2>", f'<img alt="{e(title)}" src="{uri}">']
    for title, columns, rows in all_tables(document):
        parts.append(f"<h2>{e(title)}</h2>")
        if not rows:
            parts.append("<p>None.</p>")
            continue
        parts.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in columns) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
