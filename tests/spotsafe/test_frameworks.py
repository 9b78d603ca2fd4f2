"""HF Trainer and Lightning under spotsafe's callbacks, as real processes against the real
S3-API server. One run is interrupted twice, each time at a fixed step: a SIGTERM at the first
epoch's last step ends in a durable save there and exit 75 (resuming from it starts the next
epoch, whose shuffle must come from the saved generator); the resumed run is SIGKILLed mid-epoch;
the run resumed again ends at the uninterrupted run's step with bitwise-equal weights. A restart
of a finished run trains nothing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from spotsafe.local.servers import LOCAL_AWS_ENV
from spotsafe.preemption import EXIT_PREEMPTED
from spotsafe_harness import create_bucket, s3_keys

FRAMEWORKS = Path(__file__).parent / "frameworks"
# (script, max_steps): 10 steps an epoch, so each run crosses into a second or third epoch.
RUNS = {"hf": ("hf_train.py", 14), "lightning": ("pl_train.py", 23)}
EPOCH_END = 10  # the first epoch's last step
KILLED_AT = 13  # mid-epoch, one step after a periodic save


def run(framework: str, uri: str, local: Path, endpoint: str, signal_at: str = ""):
    """The framework's script to its end (signal_at, e.g. "TERM@10": the signal it sends itself
    at that step's end): (exit code, its JSON result or None, stderr)."""
    script, steps = RUNS[framework]
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", str(FRAMEWORKS / script), uri, str(local), str(steps)]
        + ([signal_at] if signal_at else []),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=FRAMEWORKS,
        env={**os.environ, **LOCAL_AWS_ENV, "AWS_ENDPOINT_URL": endpoint},
    )
    out, err = proc.communicate(timeout=300)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    return proc.returncode, json.loads(last) if last.startswith("{") else None, err


@pytest.fixture(scope="module", params=sorted(RUNS))
def reference(request, tmp_path_factory, s3_endpoint: str) -> tuple[str, dict]:
    """The framework's uninterrupted run, in a bucket of its own."""
    framework = request.param
    create_bucket(s3_endpoint, f"frameworks-{framework}")
    local = tmp_path_factory.mktemp(framework)
    uri = f"s3://frameworks-{framework}/reference"
    code, result, err = run(framework, uri, local, s3_endpoint)
    assert code == 0, err
    return framework, result


def test_interrupted_runs_resume_to_the_uninterrupted_weights(
    reference, tmp_path, aws_env: str
) -> None:
    framework, expected = reference
    uri = f"s3://frameworks-{framework}/interrupted"
    code, _, err = run(framework, uri, tmp_path / "first", aws_env, f"TERM@{EPOCH_END}")
    assert code == EXIT_PREEMPTED, err
    stopped = int(re.search(r"final save at step (\d+) durable", err)[1])
    assert stopped == EPOCH_END, "the notice is taken at the step boundary it came in"
    assert f"step-{stopped}/manifest.json" in s3_keys(uri)

    # On a new node: resumed, then killed without a word.
    code, _, err = run(framework, uri, tmp_path / "second", aws_env, f"KILL@{KILLED_AT}")
    assert code == -signal.SIGKILL, err

    code, resumed, err = run(framework, uri, tmp_path / "third", aws_env)
    assert code == 0, err
    assert resumed == expected, "same step count and bitwise-equal weights"


def test_restart_of_a_finished_run_trains_nothing(reference, tmp_path, aws_env: str) -> None:
    framework, expected = reference
    uri = f"s3://frameworks-{framework}/reference"
    before = [k for k in s3_keys(uri) if k.startswith("step-")]
    code, result, err = run(framework, uri, tmp_path, aws_env)
    assert code == 0, err
    # The code after trainer.train() / fit() ran, on the final checkpoint's weights, bitwise,
    # with no optimizer step more (the HF Trainer alone would train one step more).
    assert result == expected
    assert [k for k in s3_keys(uri) if k.startswith("step-")] == before
