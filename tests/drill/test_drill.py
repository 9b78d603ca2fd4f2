"""A small seeded drill, end to end: real trainers, real notices, a real S3-API server; then the
baseline arm on the same interruption schedule, and goodput for both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from spotsafe.goodput import CAUSES

from spotctl.drill.cluster import SPOT, Node
from spotctl.drill.config import DrillConfig
from spotctl.drill.harness import Drill
from spotctl.drill.jobs import JobSpec, Run

# Small enough for a shared 2-core machine; the rates make sure both kinds of preemption land
# while the jobs train. The baseline arm's manual delay is short, so that it finishes soon.
MANUAL_DELAY_S = 4
STALL_S = 120
"""The drill's deadline: steps that stop advancing this long end it."""
SILENT_S = 900
"""No output this long: stuck outside the arms (the references run silently, in minutes)."""
# Jobs long enough that the seeded schedule's notices find pods on an idle machine too, where
# the small model trains about 1,500 steps a second.
SMALL_STEPS = 5000
SMALL_DRILL = [
    "--seed", "3",
    "--jobs", "2",
    "--steps", str(SMALL_STEPS),
    "--every-steps", "100",
    "--spot-nodes", "2",
    "--on-demand-nodes", "1",
    "--notices-per-min", "20",
    "--notice-s", "5",
    "--hard-kills", "1",
    "--hard-kill-window-s", "1", "3",
    "--on-demand-after-s", "2",
    "--manual-delay-s", str(MANUAL_DELAY_S),
    "--timeout-s", str(STALL_S),
]  # fmt: skip


def drill(*args: str) -> subprocess.CompletedProcess:
    """The drill ends itself once no job's step advances for --timeout-s (STALL_S), so a slow
    machine makes it slow, not red. Before and between its arms it prints as it goes; a drill
    silent for SILENT_S is stuck there, and is stopped."""
    argv = [str(Path(sys.executable).with_name("spotctl")), "drill", *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        printed, printed_at = 0, time.monotonic()
        while proc.poll() is None:
            time.sleep(1)
            size = sum(os.fstat(f.fileno()).st_size for f in (out, err))
            if size > printed:
                printed, printed_at = size, time.monotonic()
            elif time.monotonic() - printed_at > SILENT_S:
                proc.kill()
                proc.wait()
                pytest.fail(f"the drill printed nothing for {SILENT_S} s: {argv}")
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            argv, proc.returncode, out.read().decode(), err.read().decode()
        )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("drill")
    result = drill(*SMALL_DRILL, "--out", str(out), "--json", str(out / "report.json"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    report["_out"] = out
    return report


def test_noticed_preemptions_lose_no_steps(report: dict) -> None:
    noticed = [i for i in report["interruptions"] if i["kind"] == "notice"]
    assert noticed, "the seeded schedule serves at least one notice"
    for interruption in noticed:
        assert interruption["fitted_deadline"] is True
        assert interruption["lost_steps"] == 0
        assert 0 < interruption["notice_to_durable_s"] < 5
        assert interruption["notice_to_resume_s"] > interruption["notice_to_durable_s"]


def test_gce_notices_alone_lose_no_steps(tmp_path: Path) -> None:
    """A GKE Spot pool: every notice comes through the GCE metadata server only."""
    path = tmp_path / "report.json"
    # No baseline arm: it has no notices to take.
    result = drill(
        *SMALL_DRILL, "--cloud", "gcp", "--baseline-jobs", "0", "--out", str(tmp_path), "--json",
        str(path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(path.read_text())
    noticed = [i for i in report["interruptions"] if i["kind"] == "notice"]
    assert noticed and {i["source"] for i in noticed} == {"gce"}
    for interruption in noticed:
        assert interruption["lost_steps"] == 0 and interruption["fitted_deadline"] is True
    assert all(job["weights_sha256"] == job["reference_sha256"] for job in report["jobs"])


def test_every_job_finishes_with_the_reference_weights(report: dict) -> None:
    assert any(i["kind"] == "hard" for i in report["interruptions"]), "a hard kill landed"
    assert len(report["jobs"]) == 2
    for job in report["jobs"]:
        assert job["finished"] and job["manual_interventions"] == 0
        assert job["weights_sha256"] == job["reference_sha256"] is not None


def test_pools_cost_and_timeline_are_reported(report: dict) -> None:
    assert set(report["pools"]) == {"spot", "on-demand"}
    for pool in report["pools"].values():
        assert 0 <= pool["idle_share"] <= 1 and 0 <= pool["utilisation"] <= 1
    cost = report["cost"]
    assert 0 < cost["actual"] < cost["all_on_demand"]
    assert cost["saving_share"] == pytest.approx(1 - cost["actual"] / cost["all_on_demand"])
    assert (report["_out"] / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--size", "huge"], "Invalid value for '--size': 'huge' is not one of 'small', 'medium'"),
        (["--notice-s", "0"], "--notice-s must be positive"),
        (["--cloud", "azure"], "Invalid value for '--cloud': 'azure' is not one of 'any', 'gcp'"),
        (
            ["--memory-tier", "--memory-every-steps", "50"],
            "--memory-every-steps must be at least 1 and below the two-node job's durable "
            "interval (50 steps)",
        ),
    ],
)
def test_bad_options_are_named_without_a_traceback(args: list[str], message: str) -> None:
    result = drill(*args, "--out", str(Path("unused")))
    assert result.returncode == 2
    assert message in " ".join(result.stderr.replace("│", " ").split())
    assert "Traceback" not in result.stderr


def test_requeued_jobs_take_on_demand_only_after_the_wait(report: dict) -> None:
    """Spot first: outside its final phase a requeued job lands on on-demand only once it has
    waited --on-demand-after-s (2 s here) for spot."""
    stopped_at: dict[str, float] = {}
    on_demand_placements = 0
    for event in report["events"]:
        if event["kind"] in ("preempted", "hard-kill", "reclaimed", "failed"):
            stopped_at[event["job"]] = event["t"]
        elif event["kind"] == "placed" and event["job"] in stopped_at:
            from_step = int(event["detail"].removeprefix("from step "))
            if event["node"].startswith("od-") and from_step < 0.8 * SMALL_STEPS:
                on_demand_placements += 1
                assert event["t"] - stopped_at[event["job"]] >= 2.0 - 0.05, event
                assert event["waited_s"] >= 2.0 - 0.05, event
    # Two spot nodes for two jobs: a reclaimed node is gone for seconds, so one job must wait.
    assert on_demand_placements >= 1


# Spot cannot be provisioned for the first 6 s. Two jobs, one on-demand node: the first job
# falls back to on-demand within the 2 s wait and finishes there; the second waits for the
# on-demand node or the end of the stockout, whichever comes first, and goes back to spot once
# it can. No notices, no hard kills: only the stockout moves them.
STOCKOUT_DRILL = [
    "--seed", "5",
    "--jobs", "2",
    "--steps", "3000",
    "--every-steps", "100",
    "--spot-nodes", "2",
    "--on-demand-nodes", "1",
    "--notices-per-min", "0",
    "--hard-kills", "0",
    "--on-demand-after-s", "2",
    "--stockout-s", "0", "6",
    "--final-phase", "0",
    "--baseline-jobs", "0",
    "--timeout-s", str(STALL_S),
]  # fmt: skip


@pytest.fixture(scope="module")
def stockout_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("stockout")
    result = drill(*STOCKOUT_DRILL, "--out", str(out), "--json", str(out / "report.json"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "report.json").read_text())


def test_stockout_falls_back_to_on_demand_within_the_wait_and_finishes(stockout_report) -> None:
    stockout = stockout_report["stockout"]
    assert stockout["window_s"] == [0, 6] and stockout["configured_wait_s"] == 2
    (fallback,) = stockout["fallbacks"]
    # Placement runs every 0.2 s: the fallback comes within one tick of the configured wait.
    assert 2 - 0.05 <= fallback["waited_s"] <= 2 + 0.25
    assert fallback["t"] < 6, "on-demand while spot is still dry"
    placements = [e for e in stockout_report["events"] if e["kind"] == "placed"]
    # No spot node is provisioned during the stockout.
    assert all(e["t"] >= 6 for e in placements if e["node"].startswith("spot-"))
    for job in stockout_report["jobs"]:
        assert job["finished"] and job["manual_interventions"] == 0
        assert job["weights_sha256"] == job["reference_sha256"] is not None
    assert stockout_report["goals"]["max_wait_before_fallback_s"] == fallback["waited_s"]


def test_after_the_stockout_the_next_start_is_on_spot(stockout_report) -> None:
    """The job that found no room on on-demand starts on spot once spot can be provisioned."""
    (fallback,) = stockout_report["stockout"]["fallbacks"]
    other = [p for p in stockout_report["stockout"]["placements"] if p["job"] != fallback["job"]]
    assert [p["pool"] for p in other] == ["spot"]
    assert other[0]["t"] >= 6
    dry = [e for e in stockout_report["events"] if e["kind"] == "spot-dry"]
    assert {e["job"] for e in dry} == {"job-1", "job-2"} and all(e["t"] < 6 for e in dry)


def test_goodput_accounts_for_every_paid_node_second_and_each_jobs_time(report: dict) -> None:
    goodput = report["goodput"]
    assert set(goodput["badput_s"]) == {*CAUSES, "other"}
    for name, pool in report["pools"].items():
        assert goodput["pools"][name]["paid_s"] == pytest.approx(pool["node_seconds"])
    assert goodput["paid_s"] == pytest.approx(
        sum(p["node_seconds"] for p in report["pools"].values())
    )
    assert 0 < goodput["ratio"] < 1
    # Paid node time: a job waiting for a node pays none of it.
    assert goodput["badput_s"]["scheduling"] == 0
    for cause in ("pod_start", "restore", "final_saves", "blocking_saves", "idle_nodes"):
        assert goodput["badput_s"][cause] > 0, cause
    # A job's time runs from its queueing at the start until it finished.
    finished_at = {e["job"]: e["t"] for e in report["events"] if e["kind"] == "finished"}
    for name, job in goodput["jobs"].items():
        assert job["run_s"] == pytest.approx(finished_at[name], abs=0.01)
        assert job["badput_s"]["idle_nodes"] == 0
    # Only the hard kill loses steps, and the drill counts them one way as the other.
    assert goodput["lost_steps"] == sum(i["lost_steps"] or 0 for i in report["interruptions"])
    assert goodput["lost_steps"] > 0 and goodput["badput_s"]["lost_work"] > 0


def test_the_baseline_arm_meets_the_same_interruptions_without_the_platform(report: dict) -> None:
    baseline, platform = report["baseline"], report["goodput"]
    assert set(baseline) >= {*platform, "manual_interventions", "time_to_finish_s"}
    assert baseline["finished"] and baseline["jobs_run"] == 2
    assert baseline["manual_delay_s"] == MANUAL_DELAY_S
    assert baseline["interruptions"] >= 1
    # Every pod that died was started again by hand; nothing else restarts it.
    assert baseline["manual_interventions"] == baseline["interruptions"]
    # No notice handling: no final saves. (Its lost steps may be 0 on a loaded machine, where a
    # kill can land while the pod is still starting.)
    assert baseline["badput_s"]["final_saves"] == 0
    # The static group pays for its nodes while someone is yet to restart a pod.
    assert baseline["badput_s"]["idle_nodes"] > 0
    assert set(baseline["pools"]["on-demand"]["badput_s"].values()) == {0}


def test_the_arms_are_compared_on_the_measures_of_the_seeds_table(report: dict) -> None:
    compared, goals = report["comparison"], report["goals"]
    assert set(compared) == {
        "goodput",
        "interruptions",
        "time_to_finish_s",
        "manual_interventions",
        "recovery_s_mean",
        "recovery_s_max",
        "lost_steps",
        "cost_usd",
    }
    assert compared["goodput"] == {
        "platform": report["goodput"]["ratio"],
        "baseline": report["baseline"]["ratio"],
    }
    assert compared["manual_interventions"]["platform"] == goals["manual_interventions"] == 0
    assert (
        compared["manual_interventions"]["baseline"] == report["baseline"]["manual_interventions"]
    )
    assert compared["cost_usd"]["platform"] == pytest.approx(report["cost"]["actual"])
    assert goals["goodput_vs_baseline"] == pytest.approx(
        report["goodput"]["ratio"] / report["baseline"]["ratio"]
    )
    # A manual restart waits at least the manual delay.
    assert compared["recovery_s_max"]["baseline"] > MANUAL_DELAY_S


def test_the_goals_weigh_pod_start_and_recovery(report: dict) -> None:
    goals, goodput = report["goals"], report["goodput"]
    pod_start = goodput["badput_s"]["pod_start"]
    assert goals["pod_start_share"] == pytest.approx(pod_start / goodput["paid_s"])
    pods = sum(j["restarts"] + 1 for j in report["jobs"])
    assert goals["pod_start_s_per_pod"] == pytest.approx(pod_start / pods)
    assert goals["recovery_s_mean"] == report["comparison"]["recovery_s_mean"]["platform"] > 0
    # The restart goal is the recovery less the waits for a node, which scheduling counts.
    resumed = [i for i in report["interruptions"] if i["notice_to_resume_s"] is not None]
    for interruption in resumed:
        assert 0 <= interruption["waited_for_node_s"] < interruption["notice_to_resume_s"]
    restarts = [i["notice_to_resume_s"] - i["waited_for_node_s"] for i in resumed]
    assert goals["restart_s_mean"] == pytest.approx(sum(restarts) / len(restarts))
    assert 0 < goals["restart_s_mean"] <= goals["recovery_s_mean"]


def test_a_pod_that_exits_wakes_the_job_controller_and_its_ledger_dates_its_training(
    tmp_path: Path,
) -> None:
    """The controller reacts to a pod's end at once, as a watch on the pod does; a recovery ends
    when the new pod's first step began by its own clock, not when a scrape next sees it."""
    exited = threading.Event()
    spec = JobSpec("job-1", seed=0, steps=1, every_steps=1, size="small", trainer="no_such_module")
    node = Node("spot-1", SPOT, "sigterm")
    run = Run.launch(spec, node, "s3://unused", {}, tmp_path, 1, time.time(), exited)
    assert exited.wait(60) and run.reap(time.time()) and run.exit_code == 1
    assert run.training_from is None  # the trainer never reached its runtime
    run.ledger = {"goodput_s": 0.0, "badput_s": {"pod_start": 2.5, "restore": 0.25}}
    assert run.training_from == pytest.approx(run.started_at + 2.75)


def test_a_notice_due_with_no_job_training_strikes_none_and_a_hard_kill_waits(
    tmp_path: Path,
) -> None:
    """The cloud's schedule does not wait for a pod to train: an arm whose jobs are back sooner
    is not struck more often. A hard kill, one of a few, waits to land."""
    drill = Drill(DrillConfig(seed=3), "s3://unused", {}, tmp_path)
    try:
        drill.notice_times, drill.kill_times = [1.0, 2.0, 9.0], [1.5]
        drill._inject(now=5.0, start=0.0)  # nothing trains yet
        assert drill.notice_times == [9.0] and drill.kill_times == [1.5]
        assert drill.interruptions == [] and drill.events == []
    finally:
        drill.cluster.close()
