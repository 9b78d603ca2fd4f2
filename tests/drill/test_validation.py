"""The drill's check of the planner, on a recorded-shape report: which measured figures become
the model's inputs, and when the drill fails for a planner that misses."""

from __future__ import annotations

import copy

import pytest
from spotsafe.goodput import CAUSES

from spotctl.drill import validation
from spotctl.drill.report import planner_check


def job_time(**badput: float) -> dict:
    seconds = dict.fromkeys((*CAUSES, "other"), 0.0) | badput
    return {"goodput_s": 10.0, "run_s": 10.0 + sum(seconds.values()), "badput_s": seconds}


# Two jobs of 1,000 steps, a save every 100; one notice, one kill without one; each job restarted
# once. The drill's report keys, as spotctl.drill.report.build writes them.
JOB = job_time(
    scheduling=1.0, pod_start=14.0, restore=1.0, lost_work=0.5, blocking_saves=0.3,
    final_saves=0.4, other=2.8,
)  # fmt: skip
REPORT = {
    "config": {"steps": 1000, "every_steps": 100, "notice_s": 5.0},
    "jobs": [{"name": "job-1", "restarts": 1}, {"name": "job-2", "restarts": 1}],
    "interruptions": [
        {"kind": "notice", "notice_to_durable_s": 0.4, "notice_to_resume_s": 8.0},
        {"kind": "hard", "notice_to_durable_s": None, "notice_to_resume_s": 9.0},
    ],
    "events": [],
    "goodput": {"jobs": {"job-1": JOB, "job-2": JOB}},
}


def test_the_models_inputs_are_the_drills_measures() -> None:
    job, interval_s, unforced_s = validation.drill_job(REPORT)
    assert job.step_s == pytest.approx(10.0 / 1000) and interval_s == pytest.approx(1.0)
    assert job.blocked_s == pytest.approx(0.6 / 20)  # 20 saves in all
    assert job.save_s == 0.4 and job.notice_s == 5.0
    # Each of the four pod starts: scheduling, pod start, restore and the unseen rest.
    assert job.restart_s == pytest.approx(2 * (1.0 + 14.0 + 1.0 + 2.8) / 4)
    # Per second of training (steps, lost ones and saves' snapshots), over both jobs.
    assert job.notice_rate == job.failure_rate == pytest.approx(1 / (2 * 10.8))
    assert not job.restarts_interrupted, "the drill strikes only pods that train"
    # Two pods per job, one of them after an interruption: one start per job is not modelled.
    assert unforced_s == pytest.approx(job.restart_s)


def test_a_drill_as_the_planner_predicts_it_passes() -> None:
    check = planner_check(copy.deepcopy(REPORT))
    figures = check["figures"]
    assert set(figures) == {"goodput", *validation.CAUSES}
    assert figures["goodput"]["measured"] == pytest.approx(20 / (2 * JOB["run_s"]))
    predicted = validation.predicted(REPORT)
    assert predicted["goodput"] + sum(predicted["badput"].values()) == pytest.approx(1)
    assert check["within_tolerance"] and check["tolerance"] == validation.TOLERANCE
    for figure in figures.values():
        assert figure["gap"] == pytest.approx(abs(figure["measured"] - figure["predicted"]))


def test_a_drill_that_loses_more_than_its_interval_allows_fails() -> None:
    """20 s of lost work per job where a save every second, and one kill, lose a second at most:
    the runtime lost checkpoints the planner counts on, and the drill says so."""
    lossy = copy.deepcopy(REPORT)
    lossy["goodput"]["jobs"] = {name: job_time(**{**JOB["badput_s"], "lost_work": 20.0})
                                for name in ("job-1", "job-2")}  # fmt: skip
    check = validation.compare(lossy)
    assert not check["within_tolerance"]
    assert check["figures"]["lost_work"]["gap"] > validation.TOLERANCE


def test_a_drill_with_no_noticed_preemption_is_not_checked() -> None:
    quiet = copy.deepcopy(REPORT)
    quiet["interruptions"] = [REPORT["interruptions"][1]]
    assert planner_check(quiet) is None


def test_the_seeds_table_is_projected_at_the_advisors_bands() -> None:
    """At the drill's measures times its time scale, on AWS's 100 s window (120 s notice less
    the drain's lag): the platform keeps more, needs no hands, recovers sooner."""
    from spotctl.drill.projection import PROJECTED_BANDS, cloud_job, project

    job, cadence_s = cloud_job(REPORT, "<5%")
    assert job.notice_s == 100 and job.restart_s == pytest.approx(60 * 2 * 18.8 / 4)
    assert cadence_s == pytest.approx(60.0) and job.final_save_fits
    bands = project(REPORT)["bands"]
    assert tuple(bands) == PROJECTED_BANDS
    for arms in bands.values():
        platform, baseline = arms["platform"], arms["baseline"]
        assert platform["badput"] < baseline["badput"]
        assert platform["hours_to_model"] < baseline["hours_to_model"]
        assert platform["interventions"] == 0 < baseline["interventions"]
        assert platform["recovery_s"] + 40 * 60 == pytest.approx(baseline["recovery_s"])
    # A worse band costs the baseline more than the platform.
    assert bands[">20%"]["baseline"]["badput"] > bands["<5%"]["baseline"]["badput"]


def test_the_projection_holds_the_platform_to_the_seeds_badput_goal() -> None:
    """One goal for the planner and the projection: the seed's badput (every cause) of paid
    time; a band whose projected badput misses it says so."""
    from rich.console import Console

    from spotctl.drill.projection import project
    from spotctl.drill.report import projection_table
    from spotctl.plan.report import BADPUT_GOAL

    projected = project(REPORT)
    assert projected["badput_goal"] == BADPUT_GOAL
    console = Console(width=200, record=True)
    console.print(projection_table(projected))
    text = console.export_text()
    assert f"badput (goal <= {BADPUT_GOAL:.0%})" in text
    for band, arms in projected["bands"].items():
        badput = arms["platform"]["badput"]
        verdict = "met" if badput <= BADPUT_GOAL else "MISSED"
        assert f"{badput:.1%} ({verdict})" in text, band
