"""`spotctl plan` as users call it: the JSON contract, the goal figure, the cost sources, and
bad input named in one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from stack_files import REPO_ROOT
from typer.testing import CliRunner

from spotctl.cli import app
from spotctl.drill.jobs import Interruption

AWS_100GB = [
    "--cloud", "aws", "--state-gb", "100", "--interruptions-per-hour", "0.05",
    "--step-s", "1", "--job-hours", "24",
]  # fmt: skip
CONTRACT = {
    "interval_s",
    "expected_goodput",
    "expected_time_ratio",
    "expected_cost_ratio",
    "breakeven_interruptions_per_hour",
    "final_save_fits",
    "assumptions",
}


def plan(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["plan", *args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_the_json_keeps_the_contract_and_states_every_input(tmp_path: Path) -> None:
    png = tmp_path / "plan.png"
    report = plan(tmp_path, *AWS_100GB, "--png", str(png))
    assert report.keys() >= CONTRACT
    a = report["assumptions"]
    assert a["state_gb"] == 100 and a["step_s"] == 1 and a["job_hours"] == 24
    assert a["interruptions_per_node_hour"] == 0.05 and a["cloud"] == "aws"
    assert a["notice_s"] == 120 and a["notice_lag_s"] == 20 and a["final_save_window_s"] == 100
    # From the state size at the stated speeds: 10 s snapshot, 100 s upload, 50 s restore.
    assert (a["blocked_s"], a["save_s"], a["restore_s"]) == (10, 110, 50)
    assert a["restart_s"] == a["node_start_s"] + a["restore_s"]
    for constant in ("stage_gb_per_s", "upload_gb_per_s", "download_gb_per_s", "node_start_s"):
        assert a[constant] > 0
    assert a["failures_per_node_hour"] == pytest.approx(419 / (54 * 24 * 2048))
    assert a["spot_price"] < a["on_demand_price"] and a["price_source"]
    assert a["model"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_100gb_state_at_5_percent_per_hour_on_aws_meets_the_badput_goal(tmp_path: Path) -> None:
    """Sharded over two nodes: 1 s step + 5 s snapshot + 50 s upload fit the 100 s window."""
    report = plan(tmp_path, *AWS_100GB, "--nodes", "2")
    assert report["final_save_fits"] and report["final_save_advice"] == []
    assert report["expected_badput"] <= 0.06 and report["badput_goal_met"]
    assert report["limited_by"] is None
    assert report["expected_goodput"] + sum(report["badput_by_cause"].values()) == pytest.approx(1)
    # The notice keeps the work: only failures without one lose any, so saves are hours apart.
    assert report["interval_s"] > 2 * 3600
    assert report["interval_steps"] == round(report["interval_s"])
    a = report["assumptions"]
    price_ratio = a["spot_price"] / a["on_demand_price"]
    assert report["expected_cost_ratio"] == pytest.approx(
        price_ratio * report["expected_time_ratio"]
    )
    assert report["expected_hours"] == pytest.approx(
        report["on_demand_hours"] * report["expected_time_ratio"]
    )
    assert 1 < report["breakeven_interruptions_per_hour"] < 100


def test_the_drains_lag_comes_off_the_notice_as_in_the_runtime(tmp_path: Path) -> None:
    """AWS's 120 s notice reaches the pod up to 20 s late (components.config.NOTICE_LAG_SECONDS,
    the Job template's SPOTSAFE_SIGTERM_LAG_S): the runtime's SIGTERM deadline is the grace less
    the lag, and a 111 s final save of 100 GB does not fit what is left."""
    from components.config import NoticeWindow

    assert NoticeWindow.default("aws").final_save_s == 100
    report = plan(tmp_path, *AWS_100GB)
    assert report["final_save_window_s"] == 100 and not report["final_save_fits"]
    # Every notice now loses work: saves come minutes apart, not hours.
    assert report["interval_s"] < 3600 and report["badput_by_cause"]["lost_work"] > 0
    no_lag = plan(tmp_path, *AWS_100GB, "--notice-lag-s", "0")
    assert no_lag["final_save_window_s"] == 120 and no_lag["final_save_fits"]
    assert no_lag["expected_goodput"] > report["expected_goodput"]


def test_a_save_longer_than_gkes_notice_says_what_to_do(tmp_path: Path) -> None:
    report = plan(
        tmp_path, "--cloud", "gcp", "--state-gb", "100", "--interruptions-per-hour", "0.5",
        "--step-s", "1", "--job-hours", "24",
    )  # fmt: skip
    assert report["assumptions"]["notice_s"] == 15 and not report["final_save_fits"]
    advice = report["final_save_advice"]
    assert [line.split(":")[0] for line in advice] == [
        "shard",
        "stage locally",
        "shorten the interval",
    ]
    # 100 GB over 8 nodes: 1.25 s of snapshot and 12.5 s of upload, plus the 1 s step, in 15 s.
    assert "over 8 nodes" in advice[0]
    # Each notice loses work now, so the interval is minutes, not hours.
    assert report["interval_s"] < 1800
    assert not report["badput_goal_met"]
    assert (
        report["limited_by"].startswith("lost work")
        and "--failures-per-hour" in report["limited_by"]
    )


def test_the_save_fits_when_the_nodes_shard_it(tmp_path: Path) -> None:
    report = plan(
        tmp_path, "--cloud", "gcp", "--state-gb", "100", "--interruptions-per-hour", "0.5",
        "--step-s", "1", "--job-hours", "24", "--nodes", "8",
    )  # fmt: skip
    a = report["assumptions"]
    assert a["shard_gb"] == 12.5 and report["final_save_fits"]
    single = plan(
        tmp_path, "--cloud", "gcp", "--state-gb", "12.5", "--interruptions-per-hour", "4",
        "--failures-per-hour", str(8 * a["failures_per_node_hour"]), "--step-s", "1",
        "--job-hours", "24",
    )  # fmt: skip
    # Eight nodes see eight times the interruptions of one; the rates are per node.
    assert report["expected_goodput"] == pytest.approx(single["expected_goodput"])
    assert report["breakeven_interruptions_per_hour"] == pytest.approx(
        single["breakeven_interruptions_per_hour"] / 8
    )


def test_an_advisor_band_maps_to_a_stated_rate(tmp_path: Path) -> None:
    report = plan(
        tmp_path, "--cloud", "aws", "--state-gb", "10", "--interruption-band", "<5%",
        "--step-s", "1", "--job-hours", "24",
    )  # fmt: skip
    a = report["assumptions"]
    assert a["interruptions_per_node_hour"] == pytest.approx(-math.log(0.95) / 730)
    assert "<5%" in a["interruption_rate_source"] and "730" in a["interruption_rate_source"]


def test_what_if_overrides_replace_the_derived_costs(tmp_path: Path) -> None:
    base = plan(tmp_path, *AWS_100GB, "--failures-per-hour", "0.01")
    what_if = plan(
        tmp_path, *AWS_100GB, "--failures-per-hour", "0.01", "--checkpoint-s", "2.5",
        "--restart-s", "900",
    )  # fmt: skip
    a = what_if["assumptions"]
    assert (a["blocked_s"], a["restart_s"]) == (2.5, 900)
    assert a["save_s"] == 2.5 + 100  # the upload stays; the blocking part is replaced
    assert a["overrides"] == ["--checkpoint-s", "--restart-s"]
    # Young/Daly: a quarter of the blocking cost, about half the interval.
    assert what_if["interval_s"] / base["interval_s"] == pytest.approx(0.5, rel=0.02)
    restarts = [r["badput_by_cause"]["restarts"] for r in (base, what_if)]
    base_restart = base["assumptions"]["restart_s"]
    assert restarts[1] == pytest.approx(restarts[0] * 900 / base_restart, rel=0.02)
    assert "node_start_s" not in a  # the restart no longer derives from the image


@pytest.mark.parametrize(
    ("cloud", "image", "image_s"),
    [("aws", "pull", 100.0), ("gcp", "stream", 2.0), ("aws", "cache", 0.0)],
)
def test_the_restart_derives_from_the_image_and_how_a_node_gets_it(
    tmp_path: Path, cloud: str, image: str, image_s: float
) -> None:
    """A new node, the image (6 GB pulled at the published 0.06 GB/s, streamed in a couple of
    seconds, or already on the node's data volume), the process's start, the restore."""
    from spotctl.plan.node_start import NODE_PROVISION_S, PROCESS_START_S, SOURCES

    args = ["--cloud", cloud, "--state-gb", "10", "--interruption-band", "<5%", "--step-s", "1",
            "--job-hours", "24", "--image", image]  # fmt: skip
    a = plan(tmp_path, *args)["assumptions"]
    assert a["image"] == image and a["image_s"] == image_s and a["image_gb"] == 6.0
    assert a["node_start_s"] == NODE_PROVISION_S + image_s + PROCESS_START_S
    assert a["restart_s"] == a["node_start_s"] + a["restore_s"]
    assert a["image_source"].startswith(SOURCES[image]) and "estimated" in a["image_gb_source"]
    bigger = plan(tmp_path, *args, "--image-gb", "12")["assumptions"]
    assert bigger["image_gb_source"] == "--image-gb"
    # Only a pull grows with the image.
    assert bigger["image_s"] == (2 * image_s if image == "pull" else image_s)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cloud", "aws", "--image", "stream"], "--image stream is not available on aws"),
        (["--cloud", "gcp", "--image", "cache"], "--image cache is not available on gcp"),
        (["--cloud", "gcp", "--image", "lazy"], "'lazy' is not one of 'pull', 'stream', 'cache'"),
        (["--cloud", "gcp", "--image-gb", "0"], "--image-gb must be a positive number"),
    ],
)
def test_a_bad_image_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "plan.json"
    common = ["--state-gb", "10", "--interruption-band", "<5%", "--step-s", "1", "--job-hours", "1"]
    result = CliRunner().invoke(app, ["plan", *args, *common, "--json", str(out)])
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_bench_sweep_is_interpolated_by_state_size(tmp_path: Path) -> None:
    bench = {
        "state_bytes": 100_000_000, "blocked_s": 0.02, "save_s": 1.0, "restore_s": 0.8,
        "baseline_upload_s": 0.9,
        "sweep": [
            {"state_bytes": 100_000_000, "blocked_s": 0.02, "save_s": 1.0, "restore_s": 0.8},
            {"state_bytes": 2_000_000_000, "blocked_s": 0.4, "save_s": 11.0, "restore_s": 6.0},
        ],
    }  # fmt: skip
    path = tmp_path / "bench.json"
    path.write_text("state: 100.0 MB\n" + json.dumps(bench) + "\n")
    common = ["--cloud", "aws", "--interruptions-per-hour", "1", "--step-s", "1",
              "--job-hours", "10", "--from-bench", str(path)]  # fmt: skip
    measured = plan(tmp_path, *common)["assumptions"]
    assert measured["state_gb"] == 0.1 and measured["save_s"] == 1.0
    assert measured["measured_state_gb"] == [0.1, 2.0]
    halfway = plan(tmp_path, *common, "--state-gb", "1.05")["assumptions"]
    assert halfway["save_s"] == pytest.approx(6.0)
    assert halfway["blocked_s"] == pytest.approx(0.21)
    assert halfway["restart_s"] == pytest.approx(halfway["node_start_s"] + 3.4)
    beyond = plan(tmp_path, *common, "--state-gb", "20")["assumptions"]
    assert beyond["save_s"] == pytest.approx(110.0)  # in proportion to the largest


def test_a_drill_report_gives_final_save_and_restart(tmp_path: Path) -> None:
    noticed = [
        Interruption("job-1", "spot-1", "notice", "aws", at=10.0, reached_step=50,
                     durable_at=10.0 + save, resumed_at=10.0 + save + restart, resumed_from=50)
        for save, restart in ((0.8, 6.0), (1.2, 8.0), (1.0, 7.0))
    ]  # fmt: skip
    hard = Interruption("job-1", "spot-2", "hard", None, at=30.0, resumed_at=40.0)
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"interruptions": [i.to_json() for i in [*noticed, hard]]}))
    a = plan(
        tmp_path, "--cloud", "aws", "--state-gb", "1", "--interruptions-per-hour", "1",
        "--step-s", "1", "--job-hours", "10", "--from-bench", str(path),
    )["assumptions"]  # fmt: skip
    assert a["save_s"] == pytest.approx(1.0) and a["restart_s"] == pytest.approx(7.0)
    assert a["blocked_s"] == pytest.approx(0.1)  # 1 GB at the stated staging speed
    assert a["costs_from"].startswith("drill report")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state-gb", "0", "--interruptions-per-hour", "1"], "--state-gb must be a positive"),
        (["--state-gb", "1"], "give one of --interruptions-per-hour and --interruption-band"),
        (["--state-gb", "1", "--interruptions-per-hour", "1", "--interruption-band", "<5%"],
         "give one of --interruptions-per-hour and --interruption-band"),
        (["--state-gb", "1", "--interruption-band", "7%"],
         "'7%' is not one of '<5%', '5-10%', '10-15%', '15-20%', '>20%'"),
        (["--state-gb", "1", "--interruptions-per-hour", "-1"], "--interruptions-per-hour must"),
        (["--state-gb", "1", "--interruptions-per-hour", "1", "--spot-price", "1"],
         "--spot-price and --on-demand-price go together"),
        (["--state-gb", "1", "--interruptions-per-hour", "1", "--checkpoint-s", "9",
          "--save-s", "2"], "--save-s (2 s) must be at least the blocking part (9 s)"),
        (["--state-gb", "1", "--interruptions-per-hour", "1", "--nodes", "0"], "--nodes must"),
        (["--state-gb", "1", "--interruptions-per-hour", "1", "--notice-lag-s", "120"],
         "--notice-lag-s (120 s) leaves nothing of the 120 s notice for the final save"),
        (["--state-gb", "1", "--interruptions-per-hour", "1e6"],
         "mostly in restarts: the restart after each interruption (--restart-s, --state-gb) at "
         "the interruption rates (--interruptions-per-hour, --failures-per-hour)"),
        (["--state-gb", "1e9", "--interruptions-per-hour", "0.05"],
         "mostly in restarts: the restart after each interruption (--restart-s, --state-gb)"),
        (["--state-gb", "1", "--interruptions-per-hour", "0.05", "--checkpoint-s", "1e9"],
         "mostly in blocking saves: the snapshot each save blocks for (--checkpoint-s"),
        (["--interruptions-per-hour", "1"], "--state-gb is required"),
        (["--interruptions-per-hour", "1", "--from-bench", "missing.json"],
         "--from-bench missing.json: No such file"),
    ],
)  # fmt: skip
def test_bad_input_is_named_in_one_line(args: list[str], message: str) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).with_name("spotctl")), "plan", "--cloud", "aws",
         "--step-s", "1", "--job-hours", "10", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr and result.stdout == ""


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("not json", "no JSON object in it"),
        ('{"state_bytes": 1000}', "neither a benchmark's JSON nor a drill report"),
        ('{"state_bytes": 1000, "save_s": 1, "blocked_s": 0.1}', "restore_s must be a positive"),
        ('{"state_bytes": 1000, "save_s": 1, "blocked_s": 0.1, "restore_s": 1, '
         '"sweep": [{"state_bytes": 5}]}', "sweep[0].blocked_s must be a positive"),
        ('{"interruptions": [{"kind": "hard"}]}', "the drill report has no noticed preemption"),
        # Python's json reads NaN; a cost must still be a finite number.
        ('{"state_bytes": 1000, "save_s": 1, "blocked_s": NaN, "restore_s": 1}',
         "blocked_s must be a positive number, not NaN"),
        ('{"state_bytes": 1000, "save_s": 1, "blocked_s": 0.1, "restore_s": 1, "sweep": 5}',
         "sweep must be a list of objects"),
        ('{"interruptions": [{"kind": "notice", "notice_to_durable_s": "2", '
         '"notice_to_resume_s": 9}]}',
         'interruptions[0].notice_to_durable_s must be a positive number, not "2"'),
        ('{"interruptions": [{"kind": "notice", "notice_to_durable_s": 5, '
         '"notice_to_resume_s": 3}]}',
         "interruptions[0].notice_to_resume_s (3 s) precedes its notice_to_durable_s (5 s)"),
    ],
)  # fmt: skip
def test_a_file_it_cannot_read_is_named(tmp_path: Path, document: str, message: str) -> None:
    path = tmp_path / "costs.json"
    path.write_text(document)
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(
        app,
        ["plan", "--cloud", "aws", "--step-s", "1", "--job-hours", "10", "--state-gb", "1",
         "--interruptions-per-hour", "1", "--from-bench", str(path), "--json", str(out)],
    )  # fmt: skip
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: --from-bench {path}: {message}")
    assert result.stderr.count("\n") == 1 and not out.exists()


def test_free_spot_keeps_the_json_strict(tmp_path: Path) -> None:
    """Spot at no cost is never dearer than on-demand: the break-even is null, not Infinity,
    which strict JSON readers refuse."""
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(
        app, ["plan", *AWS_100GB, "--spot-price", "0", "--on-demand-price", "1", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text(), parse_constant=lambda name: pytest.fail(name))
    assert report["breakeven_interruptions_per_hour"] is None
    assert report["expected_cost_ratio"] == 0
    assert "never: spot is free" in result.output


@pytest.mark.parametrize(
    ("cloud", "stack", "image", "setting"),
    [
        ("gcp", "gcp-prod", "stream", "gcp.image_streaming"),
        ("aws", "prod", "pull", "neither gcp.image_streaming nor aws.gpu_ami.image_cache_snapshot"),
    ],
)
def test_the_stack_says_how_its_nodes_get_the_image(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cloud: str,
    stack: str,
    image: str,
    setting: str,
) -> None:
    monkeypatch.chdir(REPO_ROOT)
    args = ["--cloud", cloud, "--state-gb", "10", "--interruption-band", "<5%", "--step-s", "1",
            "--job-hours", "24", "--stack", stack]  # fmt: skip
    a = plan(tmp_path, *args)["assumptions"]
    assert a["image"] == image and a["image_from"] == f"--stack {stack}: {setting}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cloud", "aws", "--stack", "gcp-prod"], "--stack gcp-prod is on gcp, not aws"),
        (["--cloud", "aws", "--stack", "nowhere"], "--stack nowhere: no stack 'nowhere'"),
        (
            ["--cloud", "aws", "--stack", "prod", "--image", "pull"],
            "give one of --image and --stack",
        ),
    ],
)
def test_a_bad_stack_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(REPO_ROOT)
    common = ["--state-gb", "10", "--interruption-band", "<5%", "--step-s", "1", "--job-hours", "1"]
    result = CliRunner().invoke(app, ["plan", *args, *common])
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_stack_is_read_from_program_outside_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a Pulumi project the stack needs --program, which the error names."""
    monkeypatch.chdir(tmp_path)
    args = ["--cloud", "gcp", "--state-gb", "10", "--interruption-band", "<5%", "--step-s", "1",
            "--job-hours", "24", "--stack", "gcp-prod"]  # fmt: skip
    result = CliRunner().invoke(app, ["plan", *args])
    assert result.exit_code == 2 and "pass --program" in result.output
    a = plan(tmp_path, *args, "--program", str(REPO_ROOT))["assumptions"]
    assert a["image"] == "stream" and a["image_from"] == "--stack gcp-prod: gcp.image_streaming"
