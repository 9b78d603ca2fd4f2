"""The memory tier beside the bucket: a restore from a live peer against one from the object
store, what a memory save blocks against what a durable save blocks, and the steps a hard kill
loses with the durable tier alone and with the memory tier.

    python benchmarks/memory_tier.py [--mb 100] [--repeats 3] [--kills 4]

Two gloo ranks on loopback stand for two nodes, each with a memory directory of its own; the
bucket is the local S3-API server (at nice 10, as the runtime's benchmark runs it). Each rank
holds an MLP with its AdamW state of about --mb MB (spotsafe.bench.saves.mlp_state), saves it
durably and to the memory tier in turns, then loses node 1's memory and restores, in turns,
from the memory tier (rank 1 fetches its snapshot from rank 0) and from the bucket (memory tier
off). Each figure is the median of --repeats, a restore timed on the slower rank (the gang
trains again when both have it). Then the example trainer's small model on two ranks, a durable
save every 200 steps, node 1 lost (SIGKILL, its memory gone) at random moments --kills times
over: the steps each kill loses (the furthest step on record less the one resumed from) without
and with a memory save every 10 steps. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RANKS = 2
DURABLE_EVERY, MEMORY_EVERY = 200, 10  # steps of the example trainer's small model


def rank_main(bucket_uri: str, memory: Path, mb: int, repeats: int) -> None:
    import torch
    import torch.distributed as dist
    from spotsafe import Checkpointer
    from spotsafe.bench.saves import live_tensors, mlp_state
    from spotsafe.bench.stats import timed
    from spotsafe.bench.tiers import save_timings, slowest

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    state = mlp_state(mb * 1_000_000)
    tiered = dict(memory_every_steps=1, memory_dir=str(memory))
    ckpt = Checkpointer(bucket_uri, keep_last=2, **tiered)
    saves = save_timings(ckpt, state, repeats)
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
    restores = {"restore_from_peer_s": from_peer, "restore_from_bucket_s": from_bucket}
    dist.all_gather_object(per_rank, {**saves, **restores})
    if rank == 0:
        medians = slowest(per_rank)
        figures = {
            "state_bytes_per_rank": sum(t.nbytes for t in live_tensors(state)),
            **{name: round(seconds, 4) for name, seconds in medians.items()},
            "peer_over_bucket": round(
                medians["restore_from_peer_s"] / medians["restore_from_bucket_s"], 3
            ),
            "memory_over_durable_blocked": round(
                medians["memory_save_blocked_s"] / medians["durable_save_blocked_s"], 3
            ),
        }
        print(json.dumps(figures))
    dist.destroy_process_group()


def lost_steps(uri: str, root: Path, memory_every: int | None, kills: int) -> list[int]:
    """Steps a hard kill loses, node 1 lost at random moments, kills times over (each restart
    the next one's run): the step reached on record less the step resumed from."""
    from spotsafe.bench.nodes import Nodes

    args = ["--steps", "1000000", "--every-steps", str(DURABLE_EVERY)]
    nodes = Nodes(uri, [root / "node0", root / "node1"], args, memory_every)
    rng, lost = random.Random(3), []
    nodes.start()
    nodes.wait(nodes.committed)  # past the first durable save
    for _ in range(kills):
        time.sleep(rng.uniform(0.0, 3.0))
        lost.append(nodes.lose(1).lost_steps)
    nodes.kill(0, 1)
    return lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="state per rank, in MB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kills", type=int, default=4, help="hard kills per arm")
    args = parser.parse_args()
    import boto3
    from spotsafe.local.servers import LOCAL_AWS_ENV, free_port, s3_server

    with s3_server(niceness=10) as endpoint, tempfile.TemporaryDirectory() as root:
        os.environ.update({**LOCAL_AWS_ENV, "AWS_ENDPOINT_URL": endpoint})
        boto3.client("s3").create_bucket(Bucket="bench")
        world = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
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
                env={**os.environ, **world, "RANK": str(rank)},
                stdout=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for rank in range(RANKS)
        ]
        outputs = [proc.communicate()[0] for proc in ranks]
        if any(proc.returncode for proc in ranks):
            sys.exit("a rank failed")
        figures = json.loads(outputs[0].splitlines()[-1])
        before = lost_steps("s3://bench/durable-only", Path(root, "a"), None, args.kills)
        after = lost_steps("s3://bench/tiered", Path(root, "b"), MEMORY_EVERY, args.kills)
    figures.update(
        durable_every_steps=DURABLE_EVERY,
        memory_every_steps=MEMORY_EVERY,
        lost_steps_durable_only=before,
        lost_steps_memory_tier=after,
        lost_memory_over_durable=round(statistics.fmean(after) / statistics.fmean(before), 3),
    )
    for name, value in figures.items():
        print(f"{name:>28}: {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rank"]:
        rank_main(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
