"""Loader worker processes under a termination signal. torchrun's agent, `tini -g` and dumb-init
signal the rank's whole process group, the loader's workers included: the workers must outlive
it until the rank has made its final save, and `spotsafe-run` must tell a crash from a
preemption. Real launchers, gloo ranks, two worker processes per loader, real signals inside a
step or at random moments, the local S3-API server; the training is the benchmark's
(benchmarks/loader_sigterms.py). Each interrupted run, resumed, ends with every tensor of the
model and the optimizer equal to those of an uninterrupted run."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from spotsafe import Checkpointer, worker_signals
from spotsafe.local.servers import LOCAL_AWS_ENV
from spotsafe.preemption import EXIT_PREEMPTED
from spotsafe_harness import BIN, benchmark_summary, create_bucket
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

LOADER_SIGTERMS = Path(__file__).parents[2] / "benchmarks" / "loader_sigterms.py"
STEPS = 30  # epochs of 16 batches on one rank, of 8 on each of two: the run crosses epochs


def start(env: dict[str, str], uri: str, ranks: int, *args: str) -> subprocess.Popen:
    """The training on `ranks` ranks under spotsafe-run, or as one plain process (ranks 0), in a
    session of its own."""
    train = [str(LOADER_SIGTERMS), "train", "--checkpoint-uri", uri, "--steps", str(STEPS), *args]
    launcher = [str(BIN / "spotsafe-run"), "--standalone", f"--nproc-per-node={ranks}"]
    return subprocess.Popen(
        [*launcher, *train] if ranks else [sys.executable, *train],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def leaves(tree: Any, path: str = "") -> dict[str, Any]:
    """Every tensor and plain value of a state dict, by its path."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in leaves(sub, f"{path}/{key}").items()}
    if isinstance(tree, list | tuple):
        return {k: v for i, sub in enumerate(tree) for k, v in leaves(sub, f"{path}/{i}").items()}
    return {path: tree}


def assert_bitwise_equal(state: dict, reference: dict) -> None:
    got, want = leaves(state), leaves(reference)
    assert got.keys() == want.keys()
    same = {path: torch.equal(got[path], value) if isinstance(value, torch.Tensor) else
            got[path] == value for path, value in want.items()}  # fmt: skip
    differ = [path for path, equal in same.items() if not equal]
    assert not differ, f"differ from the uninterrupted run: {differ}"


@pytest.fixture(scope="module")
def env(s3_endpoint: str) -> dict[str, str]:
    # The notice as the Job template passes it on AWS (benchmarks/loader_sigterms.py's NOTICE).
    notice = {"SPOTSAFE_SIGTERM_GRACE_S": "120", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "120"}
    return {**os.environ, **LOCAL_AWS_ENV, "AWS_ENDPOINT_URL": s3_endpoint, **notice}


@pytest.fixture(scope="module")
def bucket(s3_endpoint: str) -> str:
    return create_bucket(s3_endpoint, f"loader-{uuid.uuid4().hex[:12]}")


def trained(out: str) -> list[int]:
    """The steps rank 0 said it trained."""
    return [int(n) for n in re.findall(r"^trained (\d+)$", out, re.M)]


def train_to_the_end(env: dict[str, str], uri: str, ranks: int, out: Path) -> tuple[dict, int]:
    """Train (or resume) to the last step: the final state rank 0 wrote, and the first step
    trained."""
    proc = start(env, uri, ranks, "--out", str(out))
    stdout, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert trained(stdout)[-1] == STEPS
    return torch.load(out), trained(stdout)[0]


@pytest.fixture(scope="module")
def uninterrupted(
    env: dict[str, str], bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[int], dict]:
    """The final state of the training left alone, by number of ranks (one plain process
    trains as one rank)."""
    states: dict[int, dict] = {}

    def final_state(ranks: int) -> dict:
        ranks = max(ranks, 1)
        if ranks not in states:
            out = tmp_path_factory.mktemp("uninterrupted") / "state.pt"
            states[ranks], _ = train_to_the_end(env, f"s3://{bucket}/ref-{ranks}", ranks, out)
        return states[ranks]

    return final_state


def test_shielded_workers_outlive_a_foreign_sigterm_and_still_end() -> None:
    """In one process, the rank: its workers drop a SIGTERM from another process (`kill`, as
    torchrun's agent), end on the loader's own (terminate) and its shutdown, die of SIGKILL."""
    loader = StatefulDataLoader(TensorDataset(torch.arange(64.0)), batch_size=4, num_workers=2)
    worker_signals.shield(loader)
    with worker_signals.held(loader):
        batches = iter(loader)
    next(batches)
    workers = list(batches._workers)
    subprocess.run(["kill", "-TERM", *(str(w.pid) for w in workers)], check=True)
    time.sleep(1)  # time to die, had they not shielded
    assert all(w.is_alive() for w in workers)
    assert len(list(batches)) == 15  # every batch left, the iterator ended: shut down
    assert [w.exitcode for w in workers] == [0, 0]

    batches = iter(loader)
    next(batches)
    stuck, killed = batches._workers
    stuck.terminate()  # what the loader does with a worker that does not stop when asked
    stuck.join(timeout=10)
    assert stuck.exitcode == 0
    with pytest.raises(RuntimeError, match=r"killed by signal: Killed"):
        subprocess.run(["kill", "-KILL", str(killed.pid)], check=True)
        for _ in range(100):  # torch's SIGCHLD handler raises in here
            time.sleep(0.05)


class Interrupted:
    """One training on its own checkpoint prefix: started with a signal to come, then resumed
    to the end and compared with the training left alone."""

    def __init__(self, env: dict[str, str], uri: str, uninterrupted, out: Path) -> None:
        self.env, self.uri, self.uninterrupted, self.out = env, uri, uninterrupted, out

    def start(self, ranks: int, *args: str) -> subprocess.Popen:
        return start(self.env, self.uri, ranks, *args)

    def newest_step(self) -> int | None:
        """The step of the newest checkpoint that verifies."""
        candidates = Checkpointer(self.uri, read_only=True).candidates()
        return candidates[0].step if candidates else None

    def resume_exactly(self, ranks: int, saved: int) -> None:
        """Resume from step `saved` to the end: every tensor as the uninterrupted run's."""
        resumed, first = train_to_the_end(self.env, self.uri, ranks, self.out)
        assert first == saved + 1
        assert_bitwise_equal(resumed, self.uninterrupted(ranks))


@pytest.fixture
def interrupted(
    aws_env: str, env: dict[str, str], bucket: str, uninterrupted, tmp_path: Path
) -> Interrupted:
    return Interrupted(env, f"s3://{bucket}/{uuid.uuid4().hex}", uninterrupted, tmp_path / "out")


@pytest.mark.parametrize(
    ("ranks", "send"),
    [
        (1, "launcher"),  # torchrun's agent passes it on to the rank's group
        (2, "launcher"),
        (2, "group"),  # rank 0's group only (tini -g); rank 1 stops at the same step
        (0, "group"),  # one plain process under tini -g or dumb-init
    ],
)
def test_sigterm_inside_a_step_final_save_exit_75_and_exact_resume(
    interrupted: Interrupted, ranks: int, send: str
) -> None:
    proc = interrupted.start(ranks, "--at-step", "7", "--send", send)
    out, err = proc.communicate(timeout=300)
    assert "is killed by signal" not in err and "Traceback" not in err, err[-3000:]
    assert proc.returncode == EXIT_PREEMPTED, err[-3000:]
    assert trained(out)[-1] == 7
    assert re.findall(r"final save at step (\d+) durable", err) == ["7"] * max(ranks, 1)
    assert interrupted.newest_step() == 7
    interrupted.resume_exactly(ranks, saved=7)


@pytest.mark.parametrize("ranks", [1, 2])
def test_sigterm_to_the_launcher_at_a_random_moment(interrupted: Interrupted, ranks: int) -> None:
    proc = interrupted.start(ranks)
    first = proc.stdout.readline()
    moment = random.uniform(0, 2.0)  # a training of STEPS steps takes about that, or longer
    time.sleep(moment)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    reached = trained(first + out)[-1]
    assert "is killed by signal" not in err and "Traceback" not in err, (moment, err[-3000:])
    assert interrupted.newest_step() == reached, moment  # nothing trained is lost
    right = (0, EXIT_PREEMPTED) if reached == STEPS else (EXIT_PREEMPTED,)
    assert proc.returncode in right, (moment, err[-3000:])
    if reached < STEPS:
        interrupted.resume_exactly(ranks, saved=reached)


def test_sigkill_of_the_node_inside_a_step_resumes_exactly(interrupted: Interrupted) -> None:
    proc = interrupted.start(2, "--at-step", "14", "--send", "kill")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err[-3000:]
    assert trained(out)[-1] == 13
    # The last periodic save: steps 11 to 14 are trained again.
    assert interrupted.newest_step() == 10
    interrupted.resume_exactly(2, saved=10)


def test_the_benchmarks_trials_lose_nothing_and_exit_right() -> None:
    # The benchmark's trials, fewer of them (its full run is the figure: --trials 100).
    summary = benchmark_summary(LOADER_SIGTERMS, trials=2, timeout=900)
    assert summary["trials"] == 2, summary
    assert (summary["steps_lost"], summary["wrong_exit_codes"], summary["crashes"]) == (0, 0, 0)
    assert summary["final_saves"] == summary["sigterms_in_training"] > 0, summary
