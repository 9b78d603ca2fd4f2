"""The drill's tables wrap rather than cut when piped: at 80 columns (what rich assumes off a
terminal) a table wider than that folds its cells onto more lines, and no cell loses characters
to an ellipsis."""

from __future__ import annotations

import io

from rich.console import Console

from spotctl.drill import accounting
from spotctl.drill.report import badput_table


def part(ratio: float, time_s: float, key: str) -> dict:
    shares = {cause: 0.01 * (i + 1) * time_s for i, cause in enumerate(accounting.ACCOUNTS)}
    return {"ratio": ratio, key: time_s, "badput_s": shares}


def test_a_wide_table_folds_at_80_columns() -> None:
    goodput = {
        **part(0.625, 5400.0, "paid_s"),
        "pools": {"spot": part(0.7, 4000.0, "paid_s")},
        "jobs": {f"job-{i}": part(0.6, 1800.0, "run_s") for i in range(3)},
    }
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(badput_table("Goodput and badput by cause", goodput))
    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
