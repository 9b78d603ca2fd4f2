"""Single-process figures: save, restore and blocking time beside plain boto3, and the training
time a save costs."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import boto3
import torch
from torch import nn

from spotsafe import Checkpointer, Extras, RNGState
from spotsafe.bench.stats import interleaved, median, ratios, spread, timed
from spotsafe.checkpointer import STATE_OBJECT
from spotsafe.examples.train import TrainConfig, make_state, train_step
from spotsafe.state import snapshot

BUCKET = "spotsafe-bench"
WIDTH = 1024  # each layer: a 4 MiB weight matrix, its bias and their AdamW moments


def mlp_state(target_bytes: int, device: str = "cpu") -> dict[str, Any]:
    """An MLP of WIDTH-wide layers with its AdamW state (3x the parameters) after one step,
    about target_bytes in all: the shape of a real training state at any size."""
    per_layer = (WIDTH * WIDTH + WIDTH) * 4 * 3
    layers = max(1, round(target_bytes / per_layer))
    model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(layers))).to(device)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, WIDTH, device=device)).square().mean().backward()
    optim.step()
    optim.zero_grad(set_to_none=True)
    return {"model": model, "optim": optim, "rng": RNGState(), "extras": Extras(step=1)}


def live_tensors(state: dict[str, Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                walk(v)

    for obj in state.values():
        walk(obj.state_dict())
    return found


def memcpy_s(tensors: list[torch.Tensor], repeats: int) -> list[float]:
    """One copy of the tensors into host buffers allocated beforehand (pinned for a device's
    tensors), as a staging copy."""
    copies = [torch.empty_like(t, device="cpu", pin_memory=t.is_cuda) for t in tensors]

    def copy() -> None:
        for c, t in zip(copies, tensors, strict=True):
            c.copy_(t, non_blocking=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    return [timed(copy) for _ in range(repeats)]


def plain_upload(s3: Any, state: dict[str, Any], key: str) -> None:
    """The baseline save: torch.save of a snapshot into memory, then boto3's upload_fileobj."""
    buffer = io.BytesIO()
    torch.save(snapshot(state), buffer)
    buffer.seek(0)
    s3.upload_fileobj(buffer, BUCKET, key)


class PlainS3:
    """The baselines on S3: plain_upload, and boto3's download_fileobj plus torch.load."""

    def __init__(self, name: str) -> None:
        self.uri = f"s3://{BUCKET}/{name}"
        self.key = f"{name}-baseline/state.pt"
        self.s3 = boto3.client("s3")

    def save(self, state: dict[str, Any]) -> None:
        plain_upload(self.s3, state, self.key)

    def restore(self) -> None:
        buffer = io.BytesIO()
        self.s3.download_fileobj(BUCKET, self.key, buffer)
        buffer.seek(0)
        torch.load(buffer, map_location="cpu", weights_only=True)


class PlainFile:
    """The baselines on the local filesystem store under root: torch.save of a snapshot into
    memory, then one write of it, synced to the disk as the store syncs its objects; a read of
    the file plus torch.load."""

    def __init__(self, root: Path, name: str) -> None:
        self.uri = (root / name).as_uri()
        self.path = root / f"{name}-baseline.pt"

    def save(self, state: dict[str, Any]) -> None:
        buffer = io.BytesIO()
        torch.save(snapshot(state), buffer)
        with open(self.path, "wb") as f:
            f.write(buffer.getbuffer())
            f.flush()
            os.fsync(f.fileno())

    def restore(self) -> None:
        torch.load(io.BytesIO(self.path.read_bytes()), map_location="cpu", weights_only=True)


def measure(state: dict[str, Any], plain: PlainS3 | PlainFile, repeats: int) -> dict[str, Any]:
    """One sweep entry, on plain's store: every figure beside its baseline, medians with their
    spread."""
    copies = memcpy_s(live_tensors(state), repeats)
    ckpt = Checkpointer(plain.uri, keep_last=2)
    ckpt.save(0, state)  # warm-up: allocates the staging buffers a steady state reuses
    ckpt.wait()
    blocked: list[float] = []
    step = 0

    def ours_save() -> None:
        nonlocal step
        step += 1
        blocked.append(timed(lambda: ckpt.save(step, state)))
        ckpt.wait()

    saves, uploads = interleaved(repeats, ours_save, lambda: plain.save(state))
    state_bytes = next(
        o.size for o in ckpt.store.list(f"step-{step}/") if o.key.endswith(STATE_OBJECT)
    )

    def ours_restore() -> None:
        assert Checkpointer(plain.uri, read_only=True).restore(state) == step

    restores, downloads = interleaved(repeats, ours_restore, plain.restore)
    ckpt.close()
    runs = {
        "save_s": saves,
        "baseline_upload_s": uploads,
        "restore_s": restores,
        "baseline_restore_s": downloads,
        "blocked_s": blocked,
        "memcpy_s": copies,
    }
    return {
        "state_bytes": state_bytes,
        "store": plain.uri.split(":")[0],
        **{key: round(median(values), 4) for key, values in runs.items()},
        "spread": {key: spread(values) for key, values in runs.items()},
        "ratio_spread": {
            "save_s": spread(ratios(saves, uploads)),
            "restore_s": spread(ratios(restores, downloads)),
            "blocked_s": spread(ratios(blocked, copies)),
        },
    }


def _step_times(cfg: TrainConfig, model: nn.Module, state: dict, until) -> list[float]:
    """Durations of training steps, until until(steps, elapsed) says stop."""
    times: list[float] = []
    started = time.perf_counter()
    while not until(len(times), time.perf_counter() - started):
        times.append(timed(lambda: train_step(cfg, model, state)))
    return times


def save_cost(size: str, rounds: int, device: str = "cpu") -> dict[str, float]:
    """Training time one save costs: the steps run while it is in flight (its blocking
    snapshot included), minus what they take without a save, the median of the steps just
    before it. Only the save's own window is exposed to other load on the machine."""
    torch.set_num_threads(1)
    cfg = TrainConfig(0, f"s3://{BUCKET}/overhead", size=size, device=device)
    model, state = make_state(cfg)
    train_step(cfg, model, state)  # allocates the optimizer's state
    ckpt = Checkpointer(cfg.checkpoint_uri, keep_last=2)
    ckpt.save(0, state)
    ckpt.wait()
    costs = []
    for step in range(1, rounds + 1):
        base = median(_step_times(cfg, model, state, lambda n, t: t >= 2.0))
        blocked = timed(lambda: ckpt.save(step, state))  # noqa: B023 - called at once
        during = _step_times(cfg, model, state, lambda n, t: n > 0 and ckpt.in_flight == 0)
        ckpt.wait()
        costs.append(blocked + sum(during) - len(during) * base)
    steps_per_s = len(_step_times(cfg, model, state, lambda n, t: t >= 2.0)) / 2.0
    ckpt.close()
    return {"save_cost_s": median(costs), "steps_per_s": steps_per_s}
