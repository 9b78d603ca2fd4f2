"""What goodput accounting costs the training thread, beside the step it accounts for.

    python benchmarks/goodput.py

Times the ledger's per-step call (spotsafe.goodput.Ledger.step) and, in the same run, the
example trainer's small step (spotsafe.examples.train, one CPU thread), the cheapest step the
runtime meets here; their ratio is the share of a step that accounting adds. The last line is
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from spotsafe.examples.train import TrainConfig, make_state, train_step
from spotsafe.goodput import Ledger


def per_call_s(fn, calls: int) -> float:
    started = time.perf_counter()
    for i in range(1, calls + 1):
        fn(i)
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="training steps timed")
    parser.add_argument("--calls", type=int, default=200_000, help="ledger calls timed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = TrainConfig(steps=args.steps, checkpoint_uri="unused", size="small")
    model, state = make_state(cfg)
    step_s = per_call_s(lambda _: train_step(cfg, model, state), args.steps)
    ledger_s = per_call_s(Ledger().step, args.calls)
    figures = {"step_s": step_s, "ledger_call_s": ledger_s, "share_of_step": ledger_s / step_s}
    for name, value in figures.items():
        print(f"{name:>14}: {value:.3g}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
