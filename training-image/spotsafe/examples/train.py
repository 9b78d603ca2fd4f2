"""Example trainer: a small deterministic model on synthetic data, checkpointed with spotsafe.

    python -m spotsafe.examples.train --steps 100 --checkpoint-uri s3://bucket/run --every-steps 10

It resumes by itself from the newest valid checkpoint, saves every K steps and once at the end.
Its last stdout line is one JSON object: final_step, resumed_from, weights_sha256 (sha256 over
the final parameters' names and bytes, in parameter order), the checkpoints it skipped and this
process's goodput and badput seconds (spotsafe.goodput).
Tests, the drill and the benchmark all run it.

On a termination notice (spotsafe.termination: SIGTERM, AWS IMDS, GCE metadata) it stops at the
next step boundary, saves that step, waits until it is durable and exits 75, "preempted, resume
me"; the JSON then says so. A rebalance recommendation makes it save at once and train on.

Under torchrun (WORLD_SIZE > 1) every rank joins a gloo process group, reads its own data shard
and averages gradients before each optimizer step; checkpoints are then sharded (DCP), all ranks
stop at the same step, and rank 0 alone prints the JSON line. With --fsdp the model and its
optimizer state are sharded over the ranks (FSDP2's fully_shard, each layer a unit) instead of
replicated, and FSDP averages the gradients.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from spotsafe import Checkpointer, DataPosition, Extras, Preempted, Run, exit_on_error
from spotsafe.preemption import EXIT_PREEMPTED

# (input width, hidden width, hidden layers, batch size). medium carries ~107 MB of model plus
# Adam state, enough to make upload time dominate a save.
SIZES = {"small": (32, 64, 2, 16), "medium": (256, 2048, 3, 16)}


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    checkpoint_uri: str
    every_steps: int = 10
    seed: int = 0
    size: str = "small"
    device: str = "cpu"
    step_s: float = 0.0
    """Seconds a step lasts at least: a larger model's step, so a signal can aim at one."""
    fsdp: bool = False


def build_model(size: str) -> nn.Module:
    width, hidden, layers, _ = SIZES[size]
    blocks: list[nn.Module] = [nn.Linear(width, hidden), nn.ReLU()]
    for _ in range(layers - 1):
        blocks += [nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(0.1)]
    return nn.Sequential(*blocks, nn.Linear(hidden, 1))


def position_in_world() -> tuple[int, int]:
    """This process's rank and the world size; (0, 1) outside torchrun."""
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def batch(
    seed: int, position: DataPosition, size: str, rank: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch at the data position. Python, NumPy and torch RNGs all shape it, so an
    exact resume needs every one of them restored. Every rank draws the same number from them,
    so they stay equal across ranks and the copy a sharded checkpoint keeps fits every rank."""
    width, _, _, batch_size = SIZES[size]
    # The generator keeps 32 bits of its seed. Ranks step by the golden ratio's 32-bit fraction,
    # a Weyl sequence, so every rank's seeds stay millions of batches apart from another's.
    base = seed * 1_000_003 + position.index + rank * 0x9E3779B9
    g = torch.Generator().manual_seed(base % 2**32)
    x = torch.randn(batch_size, width, generator=g)
    x += torch.from_numpy(np.random.standard_normal(x.shape).astype(np.float32)) * 0.01
    if random.random() < 0.5:
        x = -x
    y = x[:, :4].sum(dim=1, keepdim=True).sin()
    position.index += 1
    return x, y


def weights_sha256(model: nn.Module) -> str:
    from torch.distributed.tensor import DTensor

    digest = hashlib.sha256()
    for name, param in model.named_parameters():
        digest.update(name.encode())
        whole = param.full_tensor() if isinstance(param, DTensor) else param  # a collective
        digest.update(whole.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def make_state(cfg: TrainConfig) -> tuple[nn.Module, dict[str, Any]]:
    """The model and everything an exact resume needs, keyed as the checkpoint stores it (the
    Run adds the random generators)."""
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(cfg.size).to(cfg.device)  # the same seed on every rank: same weights
    if cfg.fsdp:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = {
        "model": model,
        "optim": optim,  # on several ranks the Run saves it by parameter name
        "sched": torch.optim.lr_scheduler.StepLR(optim, step_size=50, gamma=0.5),
        "scaler": torch.amp.GradScaler(cfg.device, enabled=cfg.device == "cuda"),
        "data": DataPosition(),
        "extras": Extras(loss=None),
    }
    return model, state


def average_gradients(model: nn.Module, world_size: int) -> None:
    """One all_reduce over all gradients, flattened, so every rank takes the same step."""
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    for grad, averaged in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
        grad.copy_(averaged.view_as(grad))


def train_step(cfg: TrainConfig, model: nn.Module, state: dict[str, Any]) -> None:
    rank, world_size = position_in_world()
    x, y = (t.to(cfg.device) for t in batch(cfg.seed, state["data"], cfg.size, rank))
    loss = nn.functional.mse_loss(model(x), y)
    optim = state["optim"]
    optim.zero_grad()
    state["scaler"].scale(loss).backward()
    if world_size > 1 and not cfg.fsdp:
        average_gradients(model, world_size)
    state["scaler"].step(optim)
    state["scaler"].update()
    state["sched"].step()
    state["extras"]["loss"] = loss.item()


def run(cfg: TrainConfig, checkpointer: Checkpointer | None = None) -> dict[str, Any]:
    """Train to cfg.steps under a spotsafe.Run: resume, save every cfg.every_steps steps and at
    the end; on a termination notice, save the step reached and report how that went."""
    torch.set_num_threads(1)  # bitwise-reproducible CPU kernels, and polite on shared machines
    if cfg.device.startswith("cuda"):  # bitwise-reproducible CUDA kernels, cuBLAS included
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    model, state = make_state(cfg)
    ckpt = checkpointer or Checkpointer(cfg.checkpoint_uri, every_steps=cfg.every_steps)
    final: dict[str, Any] = {}
    try:
        with Run(ckpt, state) as training:
            for _ in training.steps(cfg.steps):
                train_step(cfg, model, state)
                time.sleep(cfg.step_s)
    except Preempted as stop:
        final = stop.report
    return {
        **final,
        "final_step": training.step,
        "resumed_from": training.resumed_from,
        "weights_sha256": weights_sha256(model),
        "stopped_early": training.step < cfg.steps,
        "skipped": [asdict(s) for s in ckpt.skipped],
        "goodput": training.ledger.to_json(),
    }


def parse_args(argv: list[str] | None) -> tuple[TrainConfig, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m spotsafe.examples.train", description=__doc__)
    p.add_argument("--steps", type=int, required=True, help="train until this step")
    p.add_argument("--checkpoint-uri", required=True, help="s3://, gs:// or file:/// URI")
    p.add_argument("--every-steps", type=int, default=10, help="save every K steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (deterministic kernels)")
    p.add_argument(
        "--metrics-port", type=int, help="serve Prometheus metrics on this port (+ local rank)"
    )
    p.add_argument("--step-s", type=float, default=0.0, help="seconds a step lasts at least")
    p.add_argument("--fsdp", action="store_true", help="shard the model over the ranks (FSDP2)")
    args = p.parse_args(argv)
    if args.steps < 0 or args.every_steps < 1 or args.step_s < 0:
        p.error("--steps must be >= 0, --every-steps >= 1 and --step-s >= 0")
    if args.fsdp and int(os.environ.get("WORLD_SIZE", "1")) < 2:
        p.error("--fsdp shards the model over several ranks: run it under torchrun")
    cfg = TrainConfig(
        args.steps,
        args.checkpoint_uri,
        args.every_steps,
        args.seed,
        args.size,
        args.device,
        args.step_s,
        args.fsdp,
    )
    return cfg, args


def main(argv: list[str] | None = None) -> int:
    cfg, args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("spotsafe").setLevel(logging.INFO)
    if args.metrics_port:
        from prometheus_client import start_http_server

        # Under torchrun the ranks of one node share its ports: local rank r serves PORT + r.
        start_http_server(args.metrics_port + int(os.environ.get("LOCAL_RANK", "0")))
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1  # set by torchrun
    if distributed:
        dist.init_process_group("gloo")
    rank, _ = position_in_world()
    try:
        with exit_on_error():
            result = run(cfg)
    finally:
        if distributed:
            dist.destroy_process_group()
    if rank == 0:  # the ranks share one stdout: one JSON line, as from a single process
        print(json.dumps(result), flush=True)
    return EXIT_PREEMPTED if result.get("preempted") else 0


if __name__ == "__main__":
    code = main()
    if code == EXIT_PREEMPTED:
        # The final checkpoint is durable. Interpreter teardown with torch loaded takes seconds
        # on a busy node, and those come out of the notice: end the pod now.
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
