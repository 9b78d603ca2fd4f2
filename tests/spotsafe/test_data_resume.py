"""Exact data resume, resumed again and again: streaming datasets (0 and 2 worker processes, a
stream with a state of its own and augmentation in the workers, a stream sharded by rank on two
ranks), samplers passed to the loader (``WeightedRandomSampler`` with its generator in the
state, ``SubsetRandomSampler`` on the global generator) and generator objects (NumPy, Python
and torch) held by the script and by the dataset.

Each form is trained uninterrupted, then interrupted three times (SIGTERM at a chosen step,
SIGKILL and SIGTERM at random moments), resumed after each, and must end with every tensor
(weights, optimizer moments, the hash chain of every batch trained on, the generators' next
draws) bitwise-identical to the uninterrupted run. Real trainer processes, the S3-API server.
"""

from __future__ import annotations

import os
import random
import signal
import textwrap
import time

import numpy as np
import pytest
import torch
from spotsafe import Extras, Run
from spotsafe.errors import ConfigError
from spotsafe_harness import run_ranks, start_ranks
from torch.utils.data import IterableDataset, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

STEPS = 24  # 3 epochs of 8 batches on each rank
SCRIPT = textwrap.dedent(
    """
    import hashlib, os, random, sys, time
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import (
        IterableDataset, SubsetRandomSampler, TensorDataset, WeightedRandomSampler,
        get_worker_info,
    )
    from torchdata.stateful_dataloader import StatefulDataLoader
    import spotsafe

    uri, form = sys.argv[1], sys.argv[2]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    features = torch.randn(64 * world, 8)


    class Stream(IterableDataset):
        # This rank's share, split between the loader's workers; its order is drawn when the
        # epoch starts and each item's noise as it is read, from whichever process reads it.
        def __iter__(self):
            worker = get_worker_info()
            mine = features[rank::world]
            if worker is not None:
                mine = mine[worker.id :: worker.num_workers]
            start = int(torch.randint(len(mine), ()))
            for i in range(len(mine)):
                yield mine[(start + i) % len(mine)] + 0.1 * torch.randn(8)


    class Positioned(IterableDataset):
        # A stream that keeps its own position: resumed where it was, not replayed.
        def __init__(self):
            self.at = 0

        def state_dict(self):
            return {"at": self.at}

        def load_state_dict(self, state):
            self.at = state["at"]

        def __iter__(self):
            worker = get_worker_info()
            mine = features[worker.id :: worker.num_workers] if worker else features
            while self.at < len(mine):
                self.at += 1
                yield mine[self.at - 1] * float(np.random.uniform(0.9, 1.1)) + torch.randn(8)
            self.at = 0


    class Noisy(TensorDataset):
        # Augmentation from a generator object the dataset holds.
        def __init__(self, *tensors):
            super().__init__(*tensors)
            self.rng = np.random.default_rng(7)

        def __getitem__(self, i):
            (x,) = super().__getitem__(i)
            return x + torch.from_numpy(self.rng.normal(size=8).astype("float32"))


    state = {}
    script_rngs = []
    if form == "stream-0":
        loader = StatefulDataLoader(Stream(), batch_size=8)
    elif form == "stream-2":
        loader = StatefulDataLoader(Stream(), batch_size=8, num_workers=2)
    elif form == "positioned-2":
        dataset = spotsafe.WorkerRNG(Positioned())
        loader = StatefulDataLoader(dataset, batch_size=8, num_workers=2)
    elif form == "weighted":
        draws = torch.Generator().manual_seed(5)
        weights = torch.rand(len(features))
        sampler = WeightedRandomSampler(weights, 64, generator=draws)
        loader = StatefulDataLoader(TensorDataset(features), batch_size=8, sampler=sampler)
        state["draws"] = draws
    elif form == "subset":
        sampler = SubsetRandomSampler(list(range(0, len(features), 2)) * 2)
        loader = StatefulDataLoader(TensorDataset(features), batch_size=8, sampler=sampler)
    elif form == "generators":
        dataset = spotsafe.WorkerRNG(Noisy(features))
        loader = StatefulDataLoader(dataset, batch_size=8, shuffle=True, num_workers=2)
        script_rngs = [np.random.default_rng(1), random.Random(2), torch.Generator().manual_seed(3)]
        state.update(numpy_rng=script_rngs[0], python_rng=script_rngs[1], torch_rng=script_rngs[2])
    elif form == "refused":
        loader = StatefulDataLoader(Noisy(features), batch_size=8)

    net = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.2), nn.Linear(16, 1))
    model = nn.parallel.DistributedDataParallel(net) if world > 1 else net
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    seen = f"seen-by-rank-{rank}"  # each rank's own entry: extras are saved once for all
    extras = spotsafe.Extras({seen: ""})
    state.update(model=net, optim=optim, extras=extras)
    with spotsafe.exit_on_error(), spotsafe.Run(uri, state, loader, every_steps=2) as run:
        for batch in run.batches(steps=24):
            x = batch[0] if isinstance(batch, list) else batch
            extras[seen] = hashlib.sha256(extras[seen].encode() + x.numpy().tobytes()).hexdigest()
            if script_rngs:
                numpy_rng, python_rng, torch_rng = script_rngs
                x = x * float(numpy_rng.uniform(0.5, 1.5)) + python_rng.random()
                x = x + torch.randn(x.shape, generator=torch_rng)
            loss = model(x).pow(2).mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
            print("step", run.step + 1, flush=True)
            time.sleep(0.02)
    draws = [torch.rand(4), torch.from_numpy(np.random.rand(4)), torch.tensor(random.random())]
    if script_rngs:
        draws += [torch.from_numpy(script_rngs[0].random(4)), torch.tensor(script_rngs[1].random())]
        draws += [torch.rand(4, generator=script_rngs[2])]
    moments = [t for s in optim.state.values() for t in (s["exp_avg"], s["exp_avg_sq"])]
    tensors = [*net.parameters(), *moments, *draws]
    digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in tensors)).hexdigest()
    print("done", run.step, extras[seen], digest, flush=True)
    """
)


def _run(uri: str, form: str, world: int) -> list[str]:
    ranks = run_ranks(SCRIPT, uri, form, world=world)
    assert [r.returncode for r in ranks] == [0] * world, [r.stderr for r in ranks]
    return [r.stdout.strip().splitlines()[-1] for r in ranks]


def _interrupt(uri: str, form: str, world: int, sig: signal.Signals, at_step: int) -> str:
    """Start the form's run, signal every rank once rank 0 reports at_step (plus a random
    part of a step), and check how the attempt ended."""
    ranks = start_ranks(SCRIPT, uri, form, world=world)
    for line in ranks[0].stdout:
        if line.startswith("step ") and int(line.split()[1]) >= at_step:
            break
    else:
        pytest.fail(f"the run ended before step {at_step}: {ranks[0].stderr.read()}")
    time.sleep(random.uniform(0, 0.02))
    for proc in ranks:
        proc.send_signal(sig)
    outputs = [proc.communicate(timeout=120) for proc in ranks]
    expected = 75 if sig == signal.SIGTERM else -signal.SIGKILL
    codes = [proc.returncode for proc in ranks]
    assert codes == [expected] * world, (sig.name, at_step, [err for _, err in outputs])
    assert not any("Traceback" in err for _, err in outputs), outputs
    return f"{sig.name}@{at_step}"


@pytest.mark.parametrize(
    ("form", "world"),
    [
        ("stream-0", 1),
        ("stream-2", 1),
        ("stream-2", 2),
        ("positioned-2", 1),
        ("weighted", 1),
        ("subset", 1),
        ("generators", 1),
    ],
)
def test_interrupted_three_times_ends_bitwise_identical(s3_uri: str, form: str, world: int) -> None:
    reference = _run(f"{s3_uri}-reference", form, world)
    seed = int(os.environ.get("SPOTSAFE_TRIAL_SEED", "0"))
    moments = random.Random(f"{form}{world}{seed}")
    plan = [
        (signal.SIGTERM, 5),  # mid-epoch, before the second resume doubles the count
        (signal.SIGKILL, moments.randint(7, 14)),
        (signal.SIGTERM, moments.randint(15, STEPS - 3)),
    ]
    done = [_interrupt(s3_uri, form, world, sig, step) for sig, step in plan]
    assert _run(s3_uri, form, world) == reference, done


def test_a_dataset_holding_a_generator_is_refused_in_one_line(s3_uri: str) -> None:
    [rank] = run_ranks(SCRIPT, s3_uri, "refused", world=1)
    assert rank.returncode == 2, rank.stderr
    [line] = [line for line in rank.stderr.splitlines() if line.startswith("error: ")]
    assert "dataset.rng is a Generator that no checkpoint keeps" in line
    assert "wrap the dataset in spotsafe.WorkerRNG(dataset)" in line
    assert "Traceback" not in rank.stderr


class _Counting(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(16.0).split(1))


class _Kept(TensorDataset):
    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


@pytest.mark.parametrize(
    ("dataset", "warned"),
    [
        (_Counting(), False),  # replayed from its start: its workers' generators come out right
        (_Kept(torch.zeros(4)), True),  # a state of its own keeps no worker generator
    ],
)
def test_the_worker_generator_warning_names_only_what_is_lost(
    tmp_path, caplog, dataset, warned: bool
) -> None:
    loader = StatefulDataLoader(dataset, num_workers=2)
    with caplog.at_level("WARNING", "spotsafe"):
        Run(f"file://{tmp_path}", {}, loader)
    assert ("wrap it in spotsafe.WorkerRNG" in caplog.text) == warned


def test_a_generator_inside_an_entry_is_named(tmp_path) -> None:
    extras = Extras(rng=np.random.default_rng())
    run = Run(f"file://{tmp_path}", {"extras": extras}, every_steps=1)
    refused = r"holds a numpy\.random\._generator\.Generator at extras/rng, .*; put the generator"
    with pytest.raises(ConfigError, match=refused), run:
        list(run.steps(1))
