"""spotsafe.Run around a plain loop: exact mid-epoch resume of a shuffling StatefulDataLoader
(seeded generator, augmentation from the global RNGs in the main process and in worker
processes), notices, the end of training, and the mistakes it names."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from spotsafe import Checkpointer, Extras, Preempted, Run, WorkerRNG
from spotsafe.errors import ConfigError, StateMismatchError
from spotsafe_harness import s3_keys
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

EPOCHS, SAMPLES, BATCH = 3, 40, 8  # 5 batches an epoch, 15 steps


class Noisy(TensorDataset):
    """Per-sample augmentation that draws from the global RNGs of whichever process fetches."""

    def __getitem__(self, index: int):
        x, y = super().__getitem__(index)
        return x + 0.1 * torch.randn_like(x), y


def setup(num_workers: int, worker_rng: bool = True):
    torch.manual_seed(0)
    dataset = Noisy(torch.randn(SAMPLES, 1, 8, 8), torch.randint(0, 3, (SAMPLES,)))
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Dropout(0.2), nn.Flatten(), nn.Linear(144, 3)
    )
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(optim, max_lr=0.05, total_steps=EPOCHS * 5)
    loader = StatefulDataLoader(
        WorkerRNG(dataset) if worker_rng else dataset,
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=num_workers,
    )

    def train_step(x: torch.Tensor, y: torch.Tensor) -> None:
        x = x * (1 + 0.05 * torch.rand(()))  # batch augmentation in the main process
        loss = nn.functional.cross_entropy(model(x), y)
        optim.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()

    return model, {"model": model, "optim": optim, "sched": sched}, loader, train_step


def digest(model: nn.Module) -> str:
    return hashlib.sha256(
        b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    ).hexdigest()


def train(uri: str, num_workers: int, steps: int | None = None) -> tuple[str, Run]:
    model, state, loader, train_step = setup(num_workers)
    with Run(uri, state, loader, every_steps=3, async_save=False) as run:
        for x, y in run.batches(epochs=EPOCHS, steps=steps):
            train_step(x, y)
    return digest(model), run


@pytest.mark.parametrize("num_workers", [0, 2])
def test_mid_epoch_resume_is_bitwise_exact(tmp_path, num_workers: int) -> None:
    reference, _ = train(f"file://{tmp_path}/reference", num_workers)
    # Stops mid-epoch, at the end of an epoch (5, 10) and just after one.
    for stop in (2, 5, 6, 10, 13):
        uri = f"file://{tmp_path}/stop-{stop}"
        _, first = train(uri, num_workers, steps=stop)
        assert first.step == stop
        torch.manual_seed(1234)  # whatever the new process would start with
        weights, resumed = train(uri, num_workers)
        assert resumed.resumed_from == stop and resumed.step == EPOCHS * 5
        assert weights == reference, f"resumed after step {stop} differs"


def test_a_notice_saves_the_step_reached_and_exits_75(s3_uri: str) -> None:
    model, state, loader, train_step = setup(0)
    with pytest.raises(Preempted) as stopped, Run(s3_uri, state, loader, every_steps=100) as run:
        for x, y in run.batches(epochs=EPOCHS):
            train_step(x, y)
            if run.step == 3:  # the step in progress is the 4th
                os.kill(os.getpid(), signal.SIGTERM)
    assert stopped.value.code == 75 and run.step == 4
    assert stopped.value.report["durable_at"] is not None
    assert "step-4/manifest.json" in s3_keys(s3_uri)

    torch.manual_seed(99)
    weights, resumed = train(s3_uri, 0)
    assert resumed.resumed_from == 4
    assert weights == train(s3_uri.replace("/run", "/reference"), 0)[0]


def test_restart_of_a_finished_run_trains_and_writes_nothing(tmp_path) -> None:
    def checkpoint_files() -> dict[str, int]:
        return {
            str(p.relative_to(tmp_path)): p.stat().st_mtime_ns for p in tmp_path.glob("step-*/**/*")
        }

    weights, _ = train(f"file://{tmp_path}", 0)
    files = checkpoint_files()
    again, run = train(f"file://{tmp_path}", 0)  # a pod killed after its last commit, restarted
    assert (again, run.resumed_from, run.step) == (weights, EPOCHS * 5, EPOCHS * 5)
    assert checkpoint_files() == files


def test_break_counts_the_step_and_the_end_saves_it(tmp_path) -> None:
    model, state, loader, train_step = setup(0)
    with Run(f"file://{tmp_path}", state, loader, every_steps=100) as run:
        for x, y in run.batches(epochs=EPOCHS):
            train_step(x, y)
            if run.step == 6:  # early stopping after the 7th step's work
                break
    assert run.step == 7 and run.ckpt.last_committed_step == 7


def test_steps_without_a_loader(tmp_path) -> None:
    model, state, _, _ = setup(0)
    with Run(f"file://{tmp_path}", state, every_steps=2) as run:
        done = list(run.steps(5))
    assert done == [1, 2, 3, 4, 5] and run.ckpt.last_committed_step == 5


def test_worker_processes_without_worker_rng_are_named(tmp_path, caplog) -> None:
    model, state, loader, _ = setup(2, worker_rng=False)
    with caplog.at_level(logging.WARNING, "spotsafe"):
        Run(f"file://{tmp_path}", state, loader)
    assert "wrap it in spotsafe.WorkerRNG" in caplog.text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda state, lo: (state, DataLoader(lo.dataset)), "use torchdata.*StatefulDataLoader"),
        (
            lambda state, lo: ({**state, "spotsafe": lo}, lo),
            r"state\['spotsafe'\] is the run's own",
        ),
    ],
)
def test_mistakes_are_named(tmp_path, change, message: str) -> None:
    _, state, loader, _ = setup(0)
    state, loader = change(state, loader)
    with pytest.raises(ConfigError, match=message):
        Run(f"file://{tmp_path}", state, loader)


def test_resuming_without_the_loader_it_was_saved_with_is_refused(tmp_path) -> None:
    train(f"file://{tmp_path}", 0, steps=2)
    _, state, _, _ = setup(0)
    with pytest.raises(StateMismatchError, match="has data-loader state but a loader is not"):
        Run(f"file://{tmp_path}", state).__enter__()


def test_a_sigterm_after_the_block_does_not_kill_a_durable_run(tmp_path) -> None:
    script = textwrap.dedent(
        f"""
        import time, torch, spotsafe
        state = {{"w": spotsafe.Extras(w=torch.zeros(2))}}
        with spotsafe.Run("file://{tmp_path}", state, every_steps=1) as run:
            for _ in run.steps(3):
                pass
        print("durable", flush=True)
        time.sleep(60)  # evaluation, export: the pod is deleted meanwhile
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "durable", proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "SIGTERM after the run's work is durable: exiting with 0" in err


def test_a_checkpoint_from_before_run_identities_is_refused_in_one_line(tmp_path) -> None:
    # What a Run of the previous format saved: its entries and its own, but no run settings.
    model, state, loader, _ = setup(0)
    older = Checkpointer(f"file://{tmp_path}", async_save=False)
    older.save(3, {**state, "spotsafe": Extras(epoch=0)})
    older.close()
    run = Run(f"file://{tmp_path}", state, loader, every_steps=3)
    with pytest.raises(StateMismatchError, match="older spotsafe, which saved no run settings"):
        run.__enter__()
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-3"]
