"""Goodput accounting in the runtime: every second of a Run goes to goodput or a named cause, the
counters say what the ledger says, and steps trained again after a kill are lost work."""

from __future__ import annotations

import json
import signal
import time

import boto3
import pytest
import torch
from prometheus_client import REGISTRY
from spotsafe import Run, goodput
from spotsafe.local.servers import free_port
from spotsafe.preemption import EXIT_PREEMPTED
from spotsafe_harness import result_of, start_trainer, wait_for_step

STEP_S = 0.01


def counters() -> dict[str, float]:
    values = {"goodput": REGISTRY.get_sample_value("spotsafe_goodput_seconds_total")}
    for cause in goodput.IN_POD:
        values[cause] = REGISTRY.get_sample_value("spotsafe_badput_seconds_total", {"cause": cause})
    return values


def test_a_runs_time_is_goodput_or_a_named_cause_and_the_counters_agree(s3_uri: str) -> None:
    model = torch.nn.Linear(4, 1)
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    before = counters()
    run = Run(s3_uri, {"model": model, "optim": optim}, every_steps=5)
    started = time.monotonic()
    with run:
        for _ in run.steps(20):
            time.sleep(STEP_S)  # the step's work
            model(torch.randn(2, 4)).sum().backward()
            optim.step()
    wall = time.monotonic() - started
    ledger = run.ledger
    assert ledger.goodput_s >= 20 * STEP_S
    assert ledger.badput_s[goodput.RESTORE] > 0
    assert ledger.badput_s[goodput.BLOCKING_SAVES] > 0  # four saves, the last one at the end
    assert ledger.badput_s[goodput.LOST_WORK] == ledger.badput_s[goodput.FINAL_SAVES] == 0
    # Only the process's first ledger carries the pod's start; this test process had others.
    in_run = ledger.goodput_s + sum(ledger.badput_s.values()) - ledger.badput_s[goodput.POD_START]
    assert in_run <= wall
    # The ledger's clock runs from entering the Run to the end of its wrap-up (the watcher
    # closed, the last progress record written): outside it lie only the with statement's calls.
    assert wall - in_run < 0.25
    after = counters()
    assert after["goodput"] - before["goodput"] == pytest.approx(ledger.goodput_s)
    for cause in goodput.IN_POD:
        assert after[cause] - before[cause] == pytest.approx(ledger.badput_s[cause])


def test_progress_interval_is_checked(s3_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(goodput.PROGRESS_ENV, "soon")
    with pytest.raises(ValueError, match="SPOTSAFE_PROGRESS_S='soon' must be a positive number"):
        Run(s3_uri, {"model": torch.nn.Linear(1, 1)})


STEPS, EVERY = 3000, 1000


@pytest.fixture
def trainer_env(aws_env: str) -> dict[str, str]:
    # Progress recorded every 0.1 s: a kill loses at most that much of the record.
    return {goodput.PROGRESS_ENV: "0.1", "SPOTSAFE_NOTICE_SOURCES": "sigterm"}


def reached(uri: str) -> int:
    """The highest step any attempt of the run recorded reaching."""
    bucket, prefix = uri.removeprefix("s3://").split("/", 1)
    s3 = boto3.client("s3")
    keys = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{goodput.PROGRESS_PREFIX}")
    return max(
        json.loads(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read())["step"]
        for o in keys.get("Contents", [])
    )


def attempt(
    uri: str,
    env: dict[str, str],
    stop: signal.Signals | None,
    at_step: int = EVERY + 300,
    exported: list[tuple[float, float]] | None = None,
) -> tuple[int, dict | None]:
    """Train; with `stop`, send it once the trainer reports `at_step`, after adding the attempt
    id and redo-until step it exports to `exported`."""
    port = free_port()
    args = ["--steps", str(STEPS), "--checkpoint-uri", uri, "--every-steps", str(EVERY)]
    proc = start_trainer(*args, "--metrics-port", str(port), env=env)
    if stop is None:
        return result_of(proc)[:2]
    wait_for_step(port, at_step, proc)
    if exported is not None:
        exported.append(
            (
                wait_for_step(port, 1, proc, "spotsafe_attempt"),
                wait_for_step(port, 0, proc, "spotsafe_redo_until_step"),
            )
        )
    time.sleep(0.3)  # a progress record past the checkpoint
    proc.send_signal(stop)
    if stop == signal.SIGKILL:
        proc.communicate(timeout=60)
        return proc.returncode, None
    return result_of(proc)[:2]


def test_steps_trained_again_after_a_kill_are_lost_work_and_a_clean_stop_loses_none(
    s3_uri: str, trainer_env: dict[str, str]
) -> None:
    uri = s3_uri
    exported: list[tuple[float, float]] = []
    code, _ = attempt(uri, trainer_env, signal.SIGKILL, exported=exported)
    assert code == -signal.SIGKILL
    killed_at = reached(uri)
    assert EVERY < killed_at < STEPS

    # The notice, once past the steps the kill lost (however fast this machine trains): the final
    # save keeps the step reached, so the next attempt repeats nothing.
    code, stopped = attempt(
        uri, trainer_env, signal.SIGTERM, at_step=killed_at + 1, exported=exported
    )
    assert code == EXIT_PREEMPTED and stopped["resumed_from"] == EVERY
    # The second attempt exports its id and how far the first got: the steps it computes again.
    assert exported == [(1, 0), (2, killed_at)]
    repeated = killed_at - EVERY
    assert stopped["final_step"] > killed_at, "it trained past the steps the kill lost"
    assert stopped["goodput"]["badput_s"][goodput.LOST_WORK] > 0
    per_step = (
        stopped["goodput"]["goodput_s"] + stopped["goodput"]["badput_s"][goodput.LOST_WORK]
    ) / (stopped["final_step"] - EVERY)
    # The repeated steps' share of the attempt's step time, within a factor for uneven steps.
    assert repeated * per_step / 3 < stopped["goodput"]["badput_s"][goodput.LOST_WORK]
    assert stopped["goodput"]["badput_s"][goodput.FINAL_SAVES] > 0

    code, finished = attempt(uri, trainer_env, None)
    assert code == 0 and finished["resumed_from"] == stopped["final_step"]
    assert finished["goodput"]["badput_s"][goodput.LOST_WORK] == 0
    assert finished["goodput"]["badput_s"][goodput.POD_START] > 0
    assert finished["goodput"]["goodput_s"] > 0
