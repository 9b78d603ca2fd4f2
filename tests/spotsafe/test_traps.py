"""The traps a real training script falls into resume exactly, on one rank and on two.

The script is written the way DDP scripts usually are, not the way the README's is: a
``DistributedSampler`` and no ``generator=`` (the loader then draws each epoch's base seed from
the global generator), dropout (each rank draws its own masks), a plain ``AdamW`` given to the
Run as it is, a warmup schedule, a ``GradScaler``, an EMA and a token counter in ``Extras``, and a
``DistributedDataParallel`` model on two ranks. It is stopped by SIGTERM mid-epoch, resumed, and
must end bitwise-identical to an uninterrupted run, on every rank.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from spotsafe import sharded
from spotsafe.errors import ConfigError
from spotsafe_harness import run_ranks

DDP_SCRIPT = textwrap.dedent(
    """
    import hashlib, os, signal, sys, torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    from torchdata.stateful_dataloader import StatefulDataLoader
    import spotsafe

    uri, stop_at = sys.argv[1], int(sys.argv[2])
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
    loader = StatefulDataLoader(data, batch_size=8, sampler=sampler)
    net = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.3), nn.Linear(16, 1))
    model = nn.parallel.DistributedDataParallel(net) if world > 1 else net
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / 4))
    scaler = torch.amp.GradScaler("cpu")
    extras = spotsafe.Extras(ema=[p.detach().clone() for p in net.parameters()], tokens=0)
    state = {"model": net, "optim": optim, "sched": sched, "scaler": scaler, "extras": extras}
    with spotsafe.exit_on_error(), spotsafe.Run(uri, state, loader, every_steps=3) as run:
        for x, y in run.batches(epochs=3):
            loss = nn.functional.mse_loss(model(x), y)
            optim.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optim)
            scaler.update()
            sched.step()
            for average, p in zip(extras["ema"], net.parameters()):  # read after restore
                average.mul_(0.9).add_(p.detach(), alpha=0.1)
            extras["tokens"] += len(x)
            if run.step + 1 == stop_at:  # a notice during this step
                os.kill(os.getpid(), signal.SIGTERM)
    moments = [s["exp_avg_sq"] for s in optim.state.values()]
    tensors = [*net.parameters(), *extras["ema"], *moments, torch.rand(4)]
    digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in tensors))
    print(run.step, extras["tokens"], digest.hexdigest(), flush=True)
    """
)


def _train(uri: str, world: int, stop_at: int = 0) -> tuple[list[int], list[str]]:
    ranks = run_ranks(DDP_SCRIPT, uri, str(stop_at), world=world)
    return [r.returncode for r in ranks], [r.stdout.strip() or r.stderr for r in ranks]


@pytest.mark.parametrize("world", [1, 2])
def test_a_usual_ddp_script_resumes_exactly(tmp_path, world: int) -> None:
    codes, uninterrupted = _train(f"file://{tmp_path}/whole", world)
    assert codes == [0] * world, uninterrupted
    # Step 8 is mid-epoch on both world sizes (12 and 6 batches per epoch per rank).
    codes, stopped = _train(f"file://{tmp_path}/stopped", world, stop_at=8)
    assert codes == [75] * world, stopped
    codes, resumed = _train(f"file://{tmp_path}/stopped", world)
    assert codes == [0] * world, resumed
    assert resumed == uninterrupted
    steps, tokens = 3 * 12 // world, 3 * 96 // world
    assert all(line.startswith(f"{steps} {tokens} ") for line in resumed), resumed


def test_an_optimizer_without_its_model_is_refused_on_several_ranks() -> None:
    model = torch.nn.Linear(2, 1)
    optim = torch.optim.Adam(model.parameters())
    # Several ranks save an optimizer by parameter name, which only the model knows.
    with pytest.raises(ConfigError, match=r"state\['optim'\] optimizes parameters of no model"):
        sharded.dcp_entries({"optim": optim})
    entries = sharded.dcp_entries({"model": model, "optim": optim})
    assert entries["model"] is model
    assert entries["optim"].state_dict()["param_groups"][0]["params"] == ["weight", "bias"]
