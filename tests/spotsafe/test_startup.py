"""A restarted pod's start-up stays short: the runtime's entry and the example trainer load no
storage library, nor torch.distributed.checkpoint, until a checkpoint URI of theirs needs it.
benchmarks/restart.py, which measures what the start-up costs, runs a trial of each arm here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from spotsafe_harness import benchmark_summary

RESTART = Path(__file__).parents[2] / "benchmarks" / "restart.py"
LATE = ("boto3", "botocore", "s3transfer", "google.cloud", "torch.distributed.checkpoint")
"""What a restart needs only once a URI or a world size asks for it."""

# Runs the code in a fresh interpreter and prints which of LATE it loaded.
LOADED = """
import json, sys
{code}
print(json.dumps(sorted(m for m in {late} if m in sys.modules)))
"""


def loaded_by(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", LOADED.format(code=code, late=LATE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import spotsafe.run",
        "from spotsafe import Run, Checkpointer",
        "import spotsafe.examples.train",
    ],
)
def test_the_entry_loads_no_storage_library(code: str) -> None:
    assert loaded_by(code) == []


def _train_twice(uri: str) -> str:
    """The example trainer, then its restart from the checkpoint, in one process."""
    return (
        "from spotsafe.examples.train import main\n"
        "for steps in (10, 20):\n"
        f"    main(['--steps', str(steps), '--every-steps', '5', '--checkpoint-uri', {uri!r}])"
    )


def test_a_local_restart_loads_no_storage_library(tmp_path) -> None:
    assert loaded_by(_train_twice(f"file://{tmp_path}/run")) == []


def test_an_s3_restart_loads_boto3_and_nothing_else_late(s3_uri: str) -> None:
    assert loaded_by(_train_twice(s3_uri)) == ["boto3", "botocore", "s3transfer"]


def test_the_restart_benchmark_splits_every_arm_into_the_pods_phases() -> None:
    summary = benchmark_summary(RESTART, trials=1, timeout=600)
    phases = ["interpreter", "imports", "torch._dynamo", "model and optimizer", "store opened"]
    phases += ["restore", "first step"]
    split = summary["phases_s"]
    assert list(split["in-order"]) == list(split["overlapped"]) == phases
    assert list(split["standby"]) == phases[1:]  # it was started before the pod was placed
    for mode, seconds in summary["to_first_step_s"].items():
        assert seconds == pytest.approx(sum(split[mode].values()))
