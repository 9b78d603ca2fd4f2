"""HF Trainer and Lightning under spotsafe's callbacks, as real processes against the real
S3-API server: a SIGTERM ends in a durable save and exit 75, a SIGKILL loses only the steps since
the last save, and each resumed run ends at the uninterrupted run's step with bitwise-equal
weights. A restart of a finished run trains nothing.

The SIGTERM comes at the end of an epoch's last step, always the same one: a save there resumes
into the next epoch, whose shuffle must come from the saved generator (a notice sent from outside
landed there only under load). The SIGKILL comes mid-epoch."""

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


def start(
    framework: str, uri: str, local: Path, endpoint: str, *notice_step: str
) -> subprocess.Popen:
    """The framework's script; with a notice step, it sends itself a SIGTERM at that step."""
    script, steps = RUNS[framework]
    return subprocess.Popen(
        [
            sys.executable,
            "-W",
            "ignore",
            str(FRAMEWORKS / script),
            uri,
            str(local),
            str(steps),
            *notice_step,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=FRAMEWORKS,
        env={**os.environ, **LOCAL_AWS_ENV, "AWS_ENDPOINT_URL": endpoint},
    )


def finish(proc: subprocess.Popen) -> tuple[int, dict | None, str]:
    out, err = proc.communicate(timeout=300)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    return proc.returncode, json.loads(last) if last.startswith("{") else None, err


def interrupted_at(proc: subprocess.Popen, step: int, sig: signal.Signals) -> None:
    for line in proc.stdout:
        if line.strip() == f"step {step}":
            proc.send_signal(sig)
            return
    raise AssertionError(f"never reached step {step}: {proc.stderr.read()}")


@pytest.fixture(scope="module", params=sorted(RUNS))
def reference(request, tmp_path_factory, s3_endpoint: str) -> tuple[str, dict]:
    """The framework's uninterrupted run, in a bucket of its own."""
    framework = request.param
    create_bucket(s3_endpoint, f"frameworks-{framework}")
    local = tmp_path_factory.mktemp(framework)
    uri = f"s3://frameworks-{framework}/reference"
    code, result, err = finish(start(framework, uri, local, s3_endpoint))
    assert code == 0, err
    return framework, result


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_interrupted_run_resumes_to_the_uninterrupted_weights(
    reference, sig, tmp_path, aws_env: str
) -> None:
    framework, expected = reference
    uri = f"s3://frameworks-{framework}/{sig.name.lower()}"
    if sig == signal.SIGTERM:
        code, _, err = finish(start(framework, uri, tmp_path / "first", aws_env, str(EPOCH_END)))
        assert code == EXIT_PREEMPTED, err
        stopped = int(re.search(r"final save at step (\d+) durable", err)[1])
        assert stopped == EPOCH_END, "the notice is taken at the step boundary it came in"
        assert f"step-{stopped}/manifest.json" in s3_keys(uri)
    else:
        proc = start(framework, uri, tmp_path / "first", aws_env)
        interrupted_at(proc, 8, sig)
        code, _, err = finish(proc)
        assert code == -signal.SIGKILL

    code, resumed, err = finish(start(framework, uri, tmp_path / "second", aws_env))  # new node
    assert code == 0, err
    assert resumed == expected, "same step count and bitwise-equal weights"


def test_restart_of_a_finished_run_trains_nothing(reference, tmp_path, aws_env: str) -> None:
    framework, expected = reference
    uri = f"s3://frameworks-{framework}/reference"
    before = [k for k in s3_keys(uri) if k.startswith("step-")]
    code, result, err = finish(start(framework, uri, tmp_path, aws_env))
    assert code == 0, err
    # The code after trainer.train() / fit() ran, on the final checkpoint's weights, bitwise,
    # with no optimizer step more (the HF Trainer alone would train one step more).
    assert result == expected
    assert [k for k in s3_keys(uri) if k.startswith("step-")] == before
