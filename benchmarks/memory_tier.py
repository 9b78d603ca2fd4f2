"""The memory tier beside the bucket: a restore from a live peer against one from the object
store, and what a memory save blocks against what a durable save blocks.

    python benchmarks/memory_tier.py [--mb 100] [--repeats 3]

Two gloo ranks on loopback stand for two nodes, each with a memory directory of its own; the
bucket is the local S3-API server (at nice 10, as the runtime's benchmark runs it). Each rank
holds an MLP with its AdamW state of about --mb MB (spotsafe.bench.saves.mlp_state), saves it
durably and to the memory tier in turns, then loses node 1's memory and restores, in turns,
from the memory tier (rank 1 fetches its snapshot from rank 0) and from the bucket (memory tier
off). Each figure is the median of --repeats, a restore timed on the slower rank (the gang
trains again when both have it). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RANKS = 2


def rank_main(bucket_uri: str, memory: Path, mb: int, repeats: int) -> None:
    import torch
    import torch.distributed as dist
    from spotsafe import Checkpointer
    from spotsafe.bench.saves import live_tensors, mlp_state
    from spotsafe.bench.stats import median, timed

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    state = mlp_state(mb * 1_000_000)
    tiered = dict(memory_every_steps=1, memory_dir=str(memory))
    ckpt = Checkpointer(bucket_uri, keep_last=2, **tiered)
    durable_blocked, memory_blocked, durable_s, memory_s = [], [], [], []
    for step in range(1, 2 * repeats + 1, 2):
        dist.barrier()
        durable_blocked.append(timed(lambda: ckpt.save(step, state)))  # noqa: B023 - called at once
        durable_s.append(durable_blocked[-1] + timed(ckpt.wait))
        dist.barrier()
        # A step the durable cadence (none here) does not take: the memory tier's alone.
        memory_blocked.append(timed(lambda: ckpt.maybe_save(step + 1, state)))  # noqa: B023
        memory_s.append(memory_blocked[-1] + timed(ckpt.memory.wait))
    ckpt.close()
    from_peer, from_bucket = [], []
    for _ in range(repeats):
        for options, times, tier in ((tiered, from_peer, "memory"), ({}, from_bucket, "bucket")):
            dist.barrier()
            if rank == 1:  # node 1's memory is gone (and with it the copy it fetched last time)
                shutil.rmtree(memory, ignore_errors=True)
            reader = Checkpointer(bucket_uri, **options)
            dist.barrier()
            step = [None]
            times.append(timed(lambda r=reader, s=step: s.__setitem__(0, r.restore(state))))
            expected = 2 * repeats if tier == "memory" else 2 * repeats - 1
            assert step[0] == expected, f"the {tier} restore loaded step {step[0]}"
            reader.close()
    per_rank: list = [None] * RANKS
    dist.all_gather_object(per_rank, (durable_blocked, memory_blocked, durable_s, memory_s,
                                      from_peer, from_bucket))  # fmt: skip
    if rank == 0:
        slowest = [list(map(max, *(r[i] for r in per_rank))) for i in range(6)]
        peer_s, bucket_s = median(slowest[4]), median(slowest[5])
        figures = {
            "state_bytes_per_rank": sum(t.nbytes for t in live_tensors(state)),
            "restore_from_peer_s": round(peer_s, 4),
            "restore_from_bucket_s": round(bucket_s, 4),
            "peer_over_bucket": round(peer_s / bucket_s, 3),
            "memory_save_blocked_s": round(median(slowest[1]), 4),
            "durable_save_blocked_s": round(median(slowest[0]), 4),
            "memory_over_durable_blocked": round(median(slowest[1]) / median(slowest[0]), 3),
            "memory_save_to_peer_s": round(median(slowest[3]), 4),
            "durable_save_s": round(median(slowest[2]), 4),
        }
        for name, value in figures.items():
            print(f"{name:>28}: {value}")
        print(json.dumps(figures))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="state per rank, in MB")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import boto3
    from spotsafe.local.servers import LOCAL_AWS_ENV, free_port, s3_server

    with s3_server(niceness=10) as endpoint, tempfile.TemporaryDirectory() as root:
        env = {**os.environ, **LOCAL_AWS_ENV, "AWS_ENDPOINT_URL": endpoint,
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
               "WORLD_SIZE": str(RANKS)}  # fmt: skip
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=LOCAL_AWS_ENV["AWS_DEFAULT_REGION"],
            aws_access_key_id=LOCAL_AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        )
        s3.create_bucket(Bucket="bench")
        ranks = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--rank",
                    "s3://bench/memory-tier",
                    f"{root}/node{rank}",
                    str(args.mb),
                    str(args.repeats),
                ],
                env={**env, "RANK": str(rank)},
            )  # fmt: skip
            for rank in range(RANKS)
        ]
        if any(proc.wait() for proc in ranks):
            sys.exit("a rank failed")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        rank_main(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
