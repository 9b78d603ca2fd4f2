"""A small seeded drill, end to end: real trainers, real notices, a real S3-API server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# Small enough for a shared 2-core machine; the rates make sure both kinds of preemption land
# while the jobs train.
SMALL_DRILL = [
    "--seed", "3",
    "--jobs", "2",
    "--steps", "2500",
    "--every-steps", "100",
    "--spot-nodes", "2",
    "--on-demand-nodes", "1",
    "--notices-per-min", "20",
    "--notice-s", "5",
    "--hard-kills", "1",
    "--hard-kill-window-s", "1", "3",
    "--on-demand-after-s", "2",
]  # fmt: skip


def drill(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).with_name("spotctl")), "drill", *args],
        capture_output=True,
        text=True,
        timeout=400,
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
    result = drill(*SMALL_DRILL, "--cloud", "gcp", "--out", str(tmp_path), "--json", str(path))
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
        (["--size", "huge"], "--size must be small or medium"),
        (["--notice-s", "0"], "--notice-s must be positive"),
        (["--cloud", "azure"], "--cloud must be any or gcp"),
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
            if event["node"].startswith("od-") and from_step < 0.8 * 2500:
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
