"""The seed's table at the providers' rates, by the planner the drill has just checked.

The drill's measures become a cloud job at the drill's time scale (its step, saves and restart
times 60 times longer, CLOUD_SECONDS_PER_DRILL_SECOND), on AWS with its notice window, at each
band of the AWS Spot Instance Advisor and the failures without notice of the planner's default.
The platform saves at the planner's interval and makes its final save within the notice; the
baseline saves at the drill's cadence, has no final save and waits for a restart by hand (the
seed's 40 minutes), paying for its node meanwhile.
"""

from __future__ import annotations

from dataclasses import replace

from components.config import NoticeWindow
from spotctl.drill.config import CLOUD_SECONDS_PER_DRILL_SECOND, SEED_MANUAL_RECOVERY_S
from spotctl.drill.validation import drill_job
from spotctl.plan import BANDS, FAILURES_PER_NODE_HOUR, band_rate
from spotctl.plan.model import HOUR_S, SpotJob, expected, interval_s
from spotctl.plan.report import BADPUT_GOAL

JOB_HOURS = 24.0
"""Training a model needs with no interruption."""
PROJECTED_BANDS = ("<5%", "10-15%", ">20%")


def cloud_job(report: dict, band: str) -> tuple[SpotJob, float]:
    """The drill's job on AWS at a band's rate, and the drill's cadence at cloud time."""
    job, cadence_s, _ = drill_job(report)
    scale = CLOUD_SECONDS_PER_DRILL_SECOND
    cloud = SpotJob(
        work_s=JOB_HOURS * HOUR_S,
        notice_rate=band_rate(band) / HOUR_S,
        failure_rate=FAILURES_PER_NODE_HOUR / HOUR_S,
        notice_s=NoticeWindow.default("aws").final_save_s,
        step_s=job.step_s * scale,
        blocked_s=job.blocked_s * scale,
        save_s=job.save_s * scale,
        restart_s=job.restart_s * scale,
    )
    return cloud, cadence_s * scale


def _row(job: SpotJob, interval: float, manual_s: float) -> dict:
    model = expected(job, interval)
    paid_h = job.work_s / model.goodput / HOUR_S
    interruptions = paid_h * HOUR_S * (job.notice_rate + job.failure_rate)
    return {
        "badput": 1 - model.goodput,
        "hours_to_model": paid_h,
        "interventions": interruptions if manual_s else 0.0,
        "recovery_s": job.restart_s,
    }


def project(report: dict) -> dict:
    """Per band: the platform's and the baseline's badput (the seed's idle share, held to
    BADPUT_GOAL), time to a model, manual interventions and recovery."""
    rows = {}
    for band in PROJECTED_BANDS:
        job, cadence_s = cloud_job(report, band)
        manual = replace(job, notice_s=0.0, restart_s=job.restart_s + SEED_MANUAL_RECOVERY_S)
        rows[band] = {
            "platform": _row(job, interval_s(job), 0.0),
            "baseline": _row(manual, cadence_s, SEED_MANUAL_RECOVERY_S),
        }
    return {
        "job_hours": JOB_HOURS,
        "bands": rows,
        "band_rates": {b: BANDS[b] for b in rows},
        "badput_goal": BADPUT_GOAL,
    }
