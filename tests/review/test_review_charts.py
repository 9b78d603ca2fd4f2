"""The review's charts say what they plot: each title names the measure of its bars, and every
bar carries its value, so a bar of zero is seen as well as a long one."""

from __future__ import annotations

from spotctl.review.collect import WARN_DAYS
from spotctl.review.report import chart_data, figure

RUNBOOKS = {
    "runbooks": {
        "freshness": [
            {"runbook": "fresh.md", "age_days": 10},
            {"runbook": "due-today.md", "age_days": WARN_DAYS},
            {"runbook": "overdue.md", "age_days": WARN_DAYS + 30},
        ]
    }
}


def test_the_runbook_chart_plots_the_days_left_its_title_names() -> None:
    [chart] = chart_data(RUNBOOKS)
    assert chart.title.startswith("Days left until each runbook is due for review")
    assert f"every {WARN_DAYS} days" in chart.title
    assert dict(zip(chart.labels, chart.values, strict=True)) == {
        "fresh.md": WARN_DAYS - 10,
        "due-today.md": 0,
        "overdue.md": -30,
    }
    assert chart.unit.startswith("days left")


def test_every_bar_is_labelled_with_its_value_zero_included() -> None:
    [chart] = chart_data(RUNBOOKS)
    drawn = figure(chart)
    [axes] = drawn.axes
    assert [text.get_text() for text in axes.texts] == ["80", "0", "-30"]
    drawn.clear()
