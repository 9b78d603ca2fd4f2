"""Benchmark: spotsafe's save and restore against plain boto3, on a local S3-API server.

    python -m spotsafe.bench --json

Every figure is measured in the same run, beside its baseline, on the example trainer's
``medium`` state (model plus AdamW state):

- blocked_s: mean time the training loop is blocked per save; memcpy_s: one in-memory copy of
  the same tensors.
- save_s: save() until durable; baseline_upload_s: torch.save into memory, then a plain boto3
  upload_fileobj of those bytes.
- restore_s: restore() of the newest checkpoint, verified; baseline_restore_s: a plain boto3
  download_fileobj plus torch.load.
- step_overhead_pct: training throughput lost with a save every 10 s, against no saves: the
  training time each save costs (steps run while it is in flight, against the median step just
  before it; median over several saves), over 10 s.

The local server runs at a lower CPU priority (nice 10): it stands in for remote storage, whose
CPU is not the training node's, yet must not starve on a busy machine.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import boto3
import torch

from spotsafe import Checkpointer
from spotsafe.errors import EXIT_USAGE, SpotsafeError
from spotsafe.examples.train import TrainConfig, make_state, train_step
from spotsafe.local_servers import LOCAL_AWS_ENV, s3_server
from spotsafe.state import snapshot

GOALS = {
    "blocked_s": ("memcpy_s", 2.0),
    "save_s": ("baseline_upload_s", 1.2),
    "restore_s": ("baseline_restore_s", 1.2),
}
MAX_STEP_OVERHEAD_PCT = 5.0
BUCKET = "spotsafe-bench"


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _median_pair(repeats: int, ours: Callable[[], Any], base: Callable[[], Any]) -> tuple:
    """Interleaved, so drift in a shared machine's load hits both sides alike."""
    pairs = [(_timed(ours), _timed(base)) for _ in range(repeats)]
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def _step_times(cfg: TrainConfig, model, state, until: Callable[[int, float], bool]) -> list:
    """Durations of training steps, until until(steps, elapsed) says stop."""
    times: list[float] = []
    started = time.perf_counter()
    while not until(len(times), time.perf_counter() - started):
        times.append(_timed(lambda: train_step(cfg, model, state)))
    return times


def _save_cost_s(cfg: TrainConfig, model, state, ckpt: Checkpointer, step: int) -> float:
    """Training time one save costs: the steps run while it is in flight (its blocking
    snapshot included), minus what they take without a save, the median of the steps just
    before it. Only the save's own window is exposed to other load on the machine."""
    base = statistics.median(_step_times(cfg, model, state, lambda n, t: t >= 2.0))
    blocked = _timed(lambda: ckpt.save(step, state))
    during = _step_times(cfg, model, state, lambda n, t: n > 0 and ckpt.in_flight == 0)
    ckpt.wait()
    return blocked + sum(during) - len(during) * base


def measure(size: str, repeats: int, rounds: int, save_every_s: float) -> dict[str, Any]:
    torch.set_num_threads(1)
    cfg = TrainConfig(steps=0, checkpoint_uri=f"s3://{BUCKET}/bench", size=size)
    model, state = make_state(cfg)
    train_step(cfg, model, state)  # allocates the optimizer's state
    tensors = [t for t in model.parameters()] + [
        t for s in state["optim"].optim.state.values() for t in s.values() if t.dim()
    ]
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=BUCKET)

    copies = [torch.empty_like(t) for t in tensors]
    memcpy_s = statistics.median(
        _timed(lambda: [c.copy_(t) for c, t in zip(copies, tensors, strict=True)])
        for _ in range(repeats)
    )
    ckpt = Checkpointer(cfg.checkpoint_uri, keep_last=2)
    ckpt.save(0, state)  # warm-up: allocates the staging buffers a steady state reuses
    ckpt.wait()
    blocked = []
    step = 0

    def ours_save() -> None:
        nonlocal step
        step += 1
        blocked.append(_timed(lambda: ckpt.save(step, state)))
        ckpt.wait()

    def base_upload() -> None:
        buffer = io.BytesIO()
        torch.save(snapshot(state), buffer)
        buffer.seek(0)
        s3.upload_fileobj(buffer, BUCKET, "baseline/state.pt")

    save_s, baseline_upload_s = _median_pair(repeats, ours_save, base_upload)
    state_bytes = ckpt.store.list(f"step-{step}/")[0].size

    def ours_restore() -> None:
        assert Checkpointer(cfg.checkpoint_uri, read_only=True).restore(state) == step

    def base_restore() -> None:
        buffer = io.BytesIO()
        s3.download_fileobj(BUCKET, "baseline/state.pt", buffer)
        buffer.seek(0)
        torch.load(buffer, map_location="cpu", weights_only=True)

    restore_s, baseline_restore_s = _median_pair(repeats, ours_restore, base_restore)

    costs = [_save_cost_s(cfg, model, state, ckpt, step + r + 1) for r in range(rounds)]
    steps_per_s = len(_step_times(cfg, model, state, lambda n, t: t >= 2.0)) / 2.0
    ckpt.close()
    return {
        "state_bytes": state_bytes,
        "blocked_s": round(statistics.mean(blocked), 4),
        "memcpy_s": round(memcpy_s, 4),
        "save_s": round(save_s, 3),
        "baseline_upload_s": round(baseline_upload_s, 3),
        "restore_s": round(restore_s, 3),
        "baseline_restore_s": round(baseline_restore_s, 3),
        "step_overhead_pct": round(100 * statistics.median(costs) / save_every_s, 2),
        "save_cost_s": round(statistics.median(costs), 3),
        "steps_per_s": round(steps_per_s, 2),
        "save_every_s": save_every_s,
    }


def report(figures: dict[str, Any]) -> list[str]:
    lines = [f"state: {figures['state_bytes'] / 1e6:.1f} MB"]
    for ours, (base, factor) in GOALS.items():
        ratio = figures[ours] / figures[base]
        verdict = "ok" if ratio <= factor else "MISSED"
        lines.append(
            f"{ours:>10} {figures[ours]:8.4f} s   {base:>18} {figures[base]:8.4f} s   "
            f"ratio {ratio:5.2f} (goal <= {factor})  {verdict}"
        )
    pct = figures["step_overhead_pct"]
    verdict = "ok" if pct <= MAX_STEP_OVERHEAD_PCT else "MISSED"
    lines.append(
        f"step overhead {pct:.2f} % with a save every {figures['save_every_s']:g} s: each save "
        f"costs {figures['save_cost_s']} s of training at {figures['steps_per_s']} steps/s "
        f"(goal <= {MAX_STEP_OVERHEAD_PCT} %)  {verdict}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spotsafe.bench", description=__doc__)
    p.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    p.add_argument("--size", choices=["small", "medium"], default="medium")
    p.add_argument("--repeats", type=int, default=5, help="timed repetitions per figure")
    p.add_argument("--rounds", type=int, default=5, help="saves timed for the step overhead")
    p.add_argument("--save-every-s", type=float, default=10.0)
    args = p.parse_args(argv)
    os.environ.update(LOCAL_AWS_ENV)
    try:
        with s3_server(niceness=10) as endpoint:
            os.environ["AWS_ENDPOINT_URL"] = endpoint
            figures = measure(args.size, args.repeats, args.rounds, args.save_every_s)
    except SpotsafeError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(report(figures)))
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
