"""An uninterrupted run of the example trainer, then what a save of its state costs in each
checkpoint tier: the training it blocks and the time until it is kept (durable in the bucket,
or on the peer's node).

    python -m spotsafe.bench.tiers [--repeats 3] TRAINER_ARGS... --checkpoint-uri URI

Run as each rank of a gloo group (spotsafe.bench.nodes starts them), with SPOTSAFE_MEMORY_DIR
the rank's node memory. The run trains as `python -m spotsafe.examples.train TRAINER_ARGS`
would; the saves are timed under URI/tiers, of the trainer's state at its first step (the shape
and bytes of every later one). Rank 0 prints one JSON line: the run's weights_sha256 and the
saves' figures, each the median over the repeats of the slower rank's (the gang trains again
when both have it). benchmarks/memory_tier.py times its larger states alike.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from spotsafe import Checkpointer
from spotsafe.bench.stats import median, timed

TIMINGS = ("durable_save_blocked_s", "durable_save_s", "memory_save_blocked_s",
           "memory_save_to_peer_s")  # fmt: skip


def save_timings(ckpt: Checkpointer, state: Mapping[str, Any], repeats: int) -> dict:
    """On every rank at once, in turns: a durable save of an odd step, then a memory save of the
    even step after it (ckpt keeps a memory save every step and no durable cadence); each one's
    blocked time and its time until kept. Lists by TIMINGS' names."""
    import torch.distributed as dist

    timings: dict[str, list[float]] = {name: [] for name in TIMINGS}
    for step in range(1, 2 * repeats + 1, 2):
        dist.barrier()
        blocked = timed(lambda: ckpt.save(step, state))  # noqa: B023 - called at once
        timings["durable_save_blocked_s"].append(blocked)
        timings["durable_save_s"].append(blocked + timed(ckpt.wait))
        dist.barrier()
        blocked = timed(lambda: ckpt.maybe_save(step + 1, state))  # noqa: B023
        timings["memory_save_blocked_s"].append(blocked)
        timings["memory_save_to_peer_s"].append(blocked + timed(ckpt.memory.wait))
    return timings


def slowest(per_rank: list[dict[str, list[float]]]) -> dict[str, float]:
    """Each timing's median over the repeats of the slowest rank's, by name."""
    return {
        name: median([max(values) for values in zip(*(r[name] for r in per_rank), strict=True)])
        for name in per_rank[0]
    }


def main() -> None:
    import torch.distributed as dist

    from spotsafe.examples.train import make_state, parse_args, run, train_step

    parser = argparse.ArgumentParser(prog="python -m spotsafe.bench.tiers")
    parser.add_argument("--repeats", type=int, default=3, help="saves timed in each tier")
    args, trainer_args = parser.parse_known_args()
    cfg, _ = parse_args(trainer_args)
    dist.init_process_group("gloo")
    weights = run(cfg)["weights_sha256"]
    model, state = make_state(cfg)
    train_step(cfg, model, state)  # AdamW holds its moments from the first step on
    ckpt = Checkpointer(f"{cfg.checkpoint_uri}/tiers", keep_last=2, memory_every_steps=1)
    timings = save_timings(ckpt, state, args.repeats)
    ckpt.close()
    per_rank: list = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, timings)
    if dist.get_rank() == 0:
        print(json.dumps({"weights_sha256": weights, "saves": slowest(per_rank)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
