"""A run's identity across restarts, and the mistakes people make between two runs: a change of
what the checkpoint was trained with is refused at resume in one line naming old and new; a
value restore could not read back is refused at the save; a restart of a finished run writes
nothing; gradient accumulation is saved only at its boundaries, so a notice mid-accumulation
loses nothing. Real PyTorch on CPU, real processes and signals, the local S3-API server; an
interrupted run is compared tensor by tensor (one digest of every tensor) with an uninterrupted
one.
"""

from __future__ import annotations

import json
import random
import signal
import time

import pytest
from spotsafe_harness import run_ranks, s3_keys, start_ranks

SCRIPT = """
import hashlib, json, os, random, signal, sys, time
import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset
from torch.utils.data.distributed import DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader
import spotsafe

uri = sys.argv[1]
cfg = dict(samples=48, batch=4, workers=0, optim="AdamW", groups=1, sched="StepLR", shuffle=True,
           ddp_sampler=False, accumulate=1, own_counter=0, every=4, epochs=2, stop_at=None,
           best="float", generators=None, signal_at=0, signal_rank=0, sleep=0.0)
cfg.update(json.loads(sys.argv[2]))
world = int(os.environ.get("WORLD_SIZE", "1"))
if world > 1:
    dist.init_process_group("gloo")
rank = dist.get_rank() if world > 1 else 0
torch.manual_seed(0)
data = TensorDataset(torch.randn(cfg["samples"], 4), torch.randn(cfg["samples"], 1))
sampler = None
if cfg["ddp_sampler"] or world > 1:
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
loader = StatefulDataLoader(
    data, batch_size=cfg["batch"], sampler=sampler, num_workers=cfg["workers"],
    shuffle=cfg["shuffle"] if sampler is None else None, generator=torch.Generator().manual_seed(0),
)
net = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 1))
model = nn.parallel.DistributedDataParallel(net) if world > 1 else net
params = list(net.parameters())
groups = [{"params": params}] if cfg["groups"] == 1 else [
    {"params": params[:2]}, {"params": params[2:], "lr": 1e-3}]
optim = getattr(torch.optim, cfg["optim"])(groups, lr=1e-2)
lr = torch.optim.lr_scheduler
sched = lr.StepLR(optim, 5) if cfg["sched"] == "StepLR" else lr.CosineAnnealingLR(optim, 20)
extras = spotsafe.Extras(best=None, tokens=0)
state = {"model": net, "optim": optim, "sched": sched, "extras": extras}
np_rng, py_rng = np.random.default_rng(7), random.Random(7)
if cfg["generators"] == "state":
    state.update(np_rng=np_rng, py_rng=py_rng)
k = cfg["accumulate"]
options = {"accumulate": k} if k > 1 else {}
with spotsafe.exit_on_error(), spotsafe.Run(
    uri, state, loader, every_steps=cfg["every"], **options
) as run:
    print("started", flush=True)
    for i, (x, y) in enumerate(run.batches(epochs=cfg["epochs"])):
        if cfg["stop_at"] is not None and run.step >= cfg["stop_at"]:
            break
        x = x + 0.01 * float(np_rng.standard_normal()) + 0.01 * py_rng.random()
        (nn.functional.mse_loss(model(x), y) / k).backward()
        boundary = (i + 1) % cfg["own_counter"] == 0 if cfg["own_counter"] else (
            run.accumulation_boundary if k > 1 else True)
        if boundary:
            optim.step()
            sched.step()
            optim.zero_grad()
        extras["tokens"] += len(x)
        extras["best"] = np.mean([1.0, 2.0]) if cfg["best"] == "numpy" else 1.5
        if cfg["generators"] == "extras":
            extras["rng"] = np_rng
        if run.step + 1 == cfg["signal_at"] and rank == cfg["signal_rank"]:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(cfg["sleep"])
moments = [t for s in optim.state.values() for t in s.values() if torch.is_tensor(t)]
tensors = [*net.parameters(), *moments, torch.rand(3), torch.tensor(extras["tokens"]),
           torch.from_numpy(np_rng.random(2)), torch.tensor(py_rng.random())]
digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in tensors)).hexdigest()
print(json.dumps({"step": run.step, "digest": digest}), flush=True)
if world > 1:
    dist.destroy_process_group()  # as the README's script ends: no gloo teardown at exit
"""


def _run(uri: str, world: int = 1, **cfg) -> list:
    return run_ranks(SCRIPT, uri, json.dumps(cfg), world=world)


def _result(rank) -> dict:
    assert rank.returncode == 0, rank.stderr
    return json.loads(rank.stdout.strip().splitlines()[-1])


def _one_line_refusal(rank, *names: str) -> str:
    """The rank ended with exit code 2 and one line on stderr, no traceback; that line."""
    assert rank.returncode == 2, rank.stderr
    lines = [line for line in rank.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in rank.stderr, rank.stderr
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def _checkpoints(uri: str) -> list[str]:
    return [key for key in s3_keys(uri) if key.startswith("step-")]


def _committed(uri: str) -> list[int]:
    """The steps whose manifest is committed, in order."""
    keys = _checkpoints(uri)
    return sorted(int(key[5:].split("/")[0]) for key in keys if key.endswith("/manifest.json"))


# ---- changes between runs --------------------------------------------------------------------

CHANGES = {
    # name: (first run, restart, what the refusal names: the setting, old, new)
    "optimizer type": ({}, {"optim": "SGD"}, ("optimizer 'optim'", "AdamW", "SGD")),
    "param groups": ({}, {"groups": 2}, ("optimizer 'optim'", "[4]", "[2, 2]")),
    "scheduler type": ({}, {"sched": "Cosine"}, ("scheduler 'sched'", "StepLR", "Cosine")),
    "batch size": ({}, {"batch": 8}, ("batch_size 4", "batch_size 8")),
    "workers 2 -> 0": ({"workers": 2}, {"workers": 0}, ("num_workers 2", "num_workers 0")),
    "workers 2 -> 4": ({"workers": 2}, {"workers": 4}, ("num_workers 2", "num_workers 4")),
    "dataset length": ({}, {"samples": 40}, ("of 48 samples", "of 40 samples")),
    "shuffle": ({}, {"shuffle": False}, ("RandomSampler", "SequentialSampler")),
    "accumulation": (
        {"accumulate": 2},
        {"accumulate": 4},
        ("accumulate 2", "accumulate 4"),
    ),
}


# The changes grouped by their first run: each group's restarts are refused against one
# checkpoint, then the script as it was goes on from it.
FIRST_RUNS = {}
for _change, (_first, _restart, _names) in CHANGES.items():
    FIRST_RUNS.setdefault(json.dumps(_first), []).append(_change)


@pytest.mark.parametrize(
    "first_run", FIRST_RUNS, ids=lambda first: first.strip("{}").replace('"', "") or "defaults"
)
def test_a_change_between_runs_is_refused_in_one_line_naming_old_and_new(
    s3_uri: str, first_run: str
) -> None:
    first = json.loads(first_run)
    [stopped] = _run(s3_uri, **first, epochs=1, stop_at=6)  # saved at step 4, then at its end
    assert _result(stopped)["step"] == 6
    committed = _checkpoints(s3_uri)
    for change in FIRST_RUNS[first_run]:
        _, restart, names = CHANGES[change]
        [refused] = _run(s3_uri, **{**first, **restart})
        line = _one_line_refusal(refused, *names)
        assert "resume with the settings it was saved with" in line, change
        assert _checkpoints(s3_uri) == committed, change  # nothing written, nothing lost
    [resumed] = _run(s3_uri, **first)  # the script as it was: the run goes on
    assert _result(resumed)["step"] == 24


def test_a_world_size_change_with_a_loader_is_refused_on_every_rank(s3_uri: str) -> None:
    # Each rank saved its own loader position and the DistributedSampler split the data in two.
    ranks = _run(s3_uri, world=2, ddp_sampler=True, epochs=1, stop_at=4)
    assert [_result(rank)["step"] for rank in ranks] == [4, 4]
    [refused] = _run(s3_uri, world=1, ddp_sampler=True)
    _one_line_refusal(refused, "world size 2", "world size 1")


# ---- values restore could not read back ------------------------------------------------------


@pytest.mark.parametrize("world", [1, 2])
def test_a_numpy_value_in_extras_is_refused_at_the_first_save(s3_uri: str, world: int) -> None:
    ranks = _run(s3_uri, world=world, best="numpy")
    for rank in ranks:
        line = _one_line_refusal(rank, "state['extras']", "numpy.float64", "extras/best")
        assert "float(x)" in line
    assert _checkpoints(s3_uri) == []  # refused before anything that could never load


def test_a_numpy_generator_in_extras_is_refused_and_the_advice_resumes_exactly(
    s3_uri: str,
) -> None:
    [refused] = _run(s3_uri + "-extras", generators="extras")
    line = _one_line_refusal(refused, "numpy.random._generator.Generator", "extras/rng")
    assert "put the generator in the state itself (state['rng'] = generator)" in line
    # The advice: generator objects in the state, saved as their states and set back.
    whole = _result(_run(s3_uri + "-whole", generators="state")[0])
    stopped = _run(s3_uri, generators="state", signal_at=7)[0]
    assert stopped.returncode == 75, stopped.stderr
    assert _result(_run(s3_uri, generators="state")[0]) == whole


# ---- a finished run --------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_a_restart_of_a_run_that_breaks_at_the_top_writes_nothing(
    s3_uri: str, workers: int
) -> None:
    # `if run.step >= 10: break` at the top of the loop; every_steps=4 did not save step 10.
    run = {"workers": workers, "generators": "state"}
    whole = _result(_run(s3_uri, **run, stop_at=10)[0])
    assert whole["step"] == 10
    keys = _checkpoints(s3_uri)
    assert _committed(s3_uri)[-1] == 10
    # A pod restarted after its run had finished.
    assert _result(_run(s3_uri, **run, stop_at=10)[0]) == whole
    assert _checkpoints(s3_uri) == keys
    # The batch fetched for the break was not trained, and is not skipped when the run goes on.
    longer = _result(_run(s3_uri + "-longer", **run, stop_at=20)[0])
    assert _result(_run(s3_uri, **run, stop_at=20)[0]) == longer


# ---- gradient accumulation -------------------------------------------------------------------

# 24 micro-batches, 6 optimizer steps; the generators the loop draws from are in the state.
ACCUMULATE = {"accumulate": 4, "every": 4, "epochs": 2, "generators": "state"}


@pytest.mark.parametrize("world", [1, 2])
def test_a_notice_mid_accumulation_saves_at_its_end_and_resumes_exactly(
    s3_uri: str, world: int
) -> None:
    steps = 24 // world
    whole = [_result(rank) for rank in _run(s3_uri + "-whole", world=world, **ACCUMULATE)]
    assert {r["step"] for r in whole} == {steps}
    # A notice during the 6th micro-batch (mid-accumulation) and during the 8th (its end).
    for signal_at in (6, 8):
        uri = f"{s3_uri}-{signal_at}"
        stopped = _run(uri, world=world, **{**ACCUMULATE, "every": 100}, signal_at=signal_at)
        assert [rank.returncode for rank in stopped] == [75] * world, stopped[0].stderr
        assert _committed(uri) == [8]  # the accumulation's end
        resumed = [_result(rank) for rank in _run(uri, world=world, **ACCUMULATE)]
        assert resumed == whole


@pytest.mark.parametrize("kill", [signal.SIGTERM, signal.SIGKILL])
def test_accumulation_interrupted_at_random_moments_resumes_exactly(
    s3_uri: str, kill: signal.Signals
) -> None:
    run = {**ACCUMULATE, "sleep": 0.03, "every": 8}
    whole = _result(_run(s3_uri + "-whole", **run)[0])
    chance = random.Random(kill)
    for trial in range(2):
        uri = f"{s3_uri}-{trial}"
        [proc] = start_ranks(SCRIPT, uri, json.dumps(run), world=1)
        assert proc.stdout.readline().strip() == "started", proc.stderr.read()
        time.sleep(chance.uniform(0.0, 24 * 0.03))
        proc.send_signal(kill)
        _, err = proc.communicate(timeout=120)
        assert "Traceback" not in err, err
        assert proc.returncode in (0, 75, -signal.SIGKILL), err
        assert all(step % 4 == 0 for step in _committed(uri))
        assert _result(_run(uri, **run)[0]) == whole, f"trial {trial} differs"


@pytest.mark.parametrize(
    ("cfg", "names"),
    [
        ({"every": 6}, ("every_steps=6 is not a multiple of accumulate=4", "every_steps=12")),
        ({"samples": 44}, ("training ends at step 22", "multiple of 4")),
        ({"own_counter": 3}, ("an optimizer stepped at step 3", "run.accumulation_boundary")),
        ({"stop_at": 6}, ("the run ended at step 6, inside an accumulation", "multiple of 4")),
    ],
)
def test_an_accumulation_that_cannot_be_saved_whole_is_refused(
    s3_uri: str, cfg: dict, names: tuple[str, ...]
) -> None:
    [refused] = _run(s3_uri, **{**ACCUMULATE, **cfg})
    _one_line_refusal(refused, *names)
    # Only whole accumulations were saved: none, or step 4 before the loop ended at step 6.
    assert _committed(s3_uri) == ([4] if "stop_at" in cfg else [])
