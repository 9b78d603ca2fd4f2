"""The drill checks the planner: from what the drill measured (step, saves, restarts, the rates of
notices and of kills without one, the notice window) the planner's model predicts the jobs'
goodput and badput by cause, and the drill's goal is that its measured figures fall within
TOLERANCE of that prediction. A planner validated so can then project the seed's table at the
providers' realistic rates, which a drill compressed into minutes cannot reach.

Per job time (from its first queueing to its end), as the model counts a job's paid time; the
nodes' idle time is the pools' concern, not the model's. Each job also starts once and, with a
final phase, moves to on-demand once: restarts that no interruption causes, which the model's
long-run figures do not hold, so they are added at the measured restart time.
"""

from __future__ import annotations

import statistics

from spotsafe.goodput import (
    BLOCKING_SAVES,
    FINAL_SAVES,
    LOST_WORK,
    POD_START,
    RESTORE,
    SCHEDULING,
)

from spotctl.drill.accounting import OTHER
from spotctl.plan.model import CAUSES, RESTARTS, SpotJob, expected

TOLERANCE = 0.05
"""Largest gap, in shares of the jobs' time, between measured and predicted goodput and each
cause of badput: a drill's handful of interruptions leaves that much to chance."""
# The drill's causes the model folds into one restart: from an interruption to training again.
RESTART_CAUSES = (SCHEDULING, POD_START, RESTORE, OTHER)


class ReportError(ValueError):
    """A drill report the planner cannot be checked against; the message says what is missing."""


def drill_job(report: dict) -> tuple[SpotJob, float, float]:
    """The model's job for one of the drill's jobs, its checkpoint interval, and the seconds of
    restarts per job that no interruption caused (its first start, its move to on-demand)."""
    config, goodput = report["config"], report["goodput"]
    jobs = goodput["jobs"].values()
    count = len(report["jobs"])
    work_s = sum(j["goodput_s"] for j in jobs) / count
    step_s = work_s / config["steps"]
    saves = count * config["steps"] / config["every_steps"]
    # The drill's notices and kills strike pods that train: its rates are per second of
    # training, over the whole job (a final phase on on-demand included, as the model has one).
    exposure_s = sum(j["goodput_s"] + j["badput_s"][LOST_WORK] for j in jobs)
    exposure_s += sum(j["badput_s"][BLOCKING_SAVES] for j in jobs)
    interruptions = report["interruptions"]
    noticed = [i for i in interruptions if i["kind"] == "notice"]
    durable = [i["notice_to_durable_s"] for i in noticed if i["notice_to_durable_s"] is not None]
    if not durable or exposure_s <= 0:
        raise ReportError("the drill report has no noticed preemption with a durable final save")
    # Every pod start costs the same restart: waiting for a node, pod start, restore, and the
    # moments the trainer's ledger does not see.
    pods = sum(j["restarts"] + 1 for j in report["jobs"])
    restart_s = sum(j["badput_s"][c] for j in jobs for c in RESTART_CAUSES) / pods
    unforced = max(0, pods - len(interruptions)) / count
    job = SpotJob(
        work_s=work_s,
        notice_rate=len(noticed) / exposure_s,
        failure_rate=(len(interruptions) - len(noticed)) / exposure_s,
        notice_s=config["notice_s"],
        step_s=step_s,
        blocked_s=sum(j["badput_s"][BLOCKING_SAVES] for j in jobs) / saves,
        save_s=statistics.median(durable),
        restart_s=restart_s,
        restarts_interrupted=False,
    )
    return job, config["every_steps"] * step_s, unforced * restart_s


def measured(report: dict) -> dict:
    """Goodput and the model's causes of badput as shares of the jobs' time."""
    jobs = report["goodput"]["jobs"].values()
    total = sum(j["run_s"] for j in jobs)
    badput = {
        cause: sum(j["badput_s"][c] for j in jobs for c in causes) / total
        for cause, causes in (
            (BLOCKING_SAVES, (BLOCKING_SAVES,)),
            (LOST_WORK, (LOST_WORK,)),
            (FINAL_SAVES, (FINAL_SAVES,)),
            (RESTARTS, RESTART_CAUSES),
        )
    }
    return {"goodput": sum(j["goodput_s"] for j in jobs) / total, "badput": badput}


def predicted(report: dict) -> dict:
    """The planner's goodput and badput by cause for the drill's jobs, as shares of their time."""
    job, interval, unforced_s = drill_job(report)
    model = expected(job, interval)
    paid_s = job.work_s / model.goodput
    total = paid_s + unforced_s
    badput = {cause: model.badput[cause] * paid_s / total for cause in CAUSES}
    badput[RESTARTS] += unforced_s / total
    return {"goodput": job.work_s / total, "badput": badput, "inputs": _inputs(job, interval)}


def _inputs(job: SpotJob, interval_s: float) -> dict:
    return {
        "step_s": job.step_s,
        "interval_s": interval_s,
        "blocked_s": job.blocked_s,
        "save_s": job.save_s,
        "restart_s": job.restart_s,
        "notice_s": job.notice_s,
        "notices_per_job_hour": job.notice_rate * 3600,
        "failures_per_job_hour": job.failure_rate * 3600,
    }


def compare(report: dict) -> dict:
    """Measured against predicted, each figure's gap, and whether all are within TOLERANCE."""
    seen, expect = measured(report), predicted(report)
    rows = [("goodput", seen["goodput"], expect["goodput"])]
    rows += [(cause, seen["badput"][cause], expect["badput"][cause]) for cause in CAUSES]
    figures = {
        name: {"measured": m, "predicted": p, "gap": abs(m - p), "within": abs(m - p) <= TOLERANCE}
        for name, m, p in rows
    }
    return {
        "tolerance": TOLERANCE,
        "figures": figures,
        "inputs": expect["inputs"],
        "within_tolerance": all(f["within"] for f in figures.values()),
    }
