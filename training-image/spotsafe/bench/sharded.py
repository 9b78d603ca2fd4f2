"""The 2-rank sharded figure: per-rank blocking time beside a per-rank memcpy, and the save
beside plain boto3 uploads of the same shard files from both ranks at once, the two in turns.

    python -m spotsafe.bench.sharded STATE_BYTES REPEATS     (as one rank; see measure())
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spotsafe.bench.saves import BUCKET, WIDTH
from spotsafe.bench.stats import median, ratios, spread, timed
from spotsafe.local.servers import free_port

RANKS = 2
TENSORS = 8  # the state: this many row-sharded WIDTH-wide matrices


def measure(state_bytes: int, repeats: int) -> dict[str, Any]:
    """Run RANKS gloo ranks on loopback; rank 0's figures."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": str(RANKS)}  # fmt: skip
    ranks = [
        subprocess.Popen(
            [sys.executable, "-m", "spotsafe.bench.sharded", str(state_bytes), str(repeats)],
            env={**env, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for rank in range(RANKS)
    ]
    outputs = [proc.communicate(timeout=1800) for proc in ranks]
    for proc, (_, err) in zip(ranks, outputs, strict=True):
        if proc.returncode:
            raise RuntimeError(f"a sharded benchmark rank failed: {err.strip()[-2000:]}")
    return json.loads(outputs[0][0].strip().splitlines()[-1])


def rank_main(state_bytes: int, repeats: int) -> None:
    import boto3
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    from spotsafe import Checkpointer, Extras
    from spotsafe.bench.saves import memcpy_s

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (RANKS,))
    rows = max(1, state_bytes // (4 * WIDTH * TENSORS * RANKS))
    local = [torch.randn(rows, WIDTH) for _ in range(TENSORS)]
    weights = {f"w{i}": DTensor.from_local(t, mesh, [Shard(0)]) for i, t in enumerate(local)}
    state = {"model": Extras(weights)}
    copies = memcpy_s(local, repeats)

    s3 = boto3.client("s3")
    ckpt = Checkpointer(f"s3://{BUCKET}/sharded", keep_last=2)
    ckpt.save(0, state)  # warm-up: the stager's buffers
    ckpt.wait()
    blocked, saves, uploads = [], [], []
    with tempfile.TemporaryDirectory() as staging:
        dcp.save(dict(state), storage_writer=dcp.FileSystemWriter(staging))
        mine = [p for p in Path(staging).iterdir() if p.name.startswith(f"__{rank}_")]
        if rank == 0:
            mine.append(Path(staging) / ".metadata")

        def upload() -> None:
            for path in mine:
                s3.upload_file(str(path), BUCKET, f"sharded-baseline/{path.name}")

        for step in range(1, repeats + 1):  # in turns, so drift in the machine's load hits both
            dist.barrier()
            started = time.perf_counter()
            blocked.append(timed(lambda: ckpt.save(step, state)))  # noqa: B023 - called at once
            ckpt.wait()
            saves.append(time.perf_counter() - started)
            dist.barrier()  # both ranks upload at once
            uploads.append(timed(upload))
    ckpt.close()
    per_rank: list[Any] = [None] * RANKS
    dist.all_gather_object(per_rank, (blocked, copies, saves, uploads))
    if rank == 0:
        # A repetition takes as long as its slowest rank.
        slowest = [max(run) for run in zip(*(r[3] for r in per_rank), strict=True)]
        figures = {
            "ranks": RANKS,
            "state_bytes": sum(t.nbytes for t in local) * RANKS,
            "blocked_s": [round(median(r[0]), 4) for r in per_rank],
            "memcpy_s": [round(median(r[1]), 4) for r in per_rank],
            "save_s": round(median(saves), 4),
            "baseline_upload_s": round(median(slowest), 4),
            "spread": {"save_s": spread(saves), "baseline_upload_s": spread(slowest)},
            "ratio_spread": {"save_s": spread(ratios(saves, slowest))},
        }
        print(json.dumps(figures))
    dist.destroy_process_group()


if __name__ == "__main__":
    rank_main(int(sys.argv[1]), int(sys.argv[2]))
