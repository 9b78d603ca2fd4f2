"""SIGTERMs to `spotsafe-run` whose ranks read a loader with worker processes.

    python benchmarks/loader_sigterms.py --trials 100

torchrun's agent passes a SIGTERM on to each rank's whole process group, the loader's worker
processes included. Each trial is `spotsafe-run` with one rank, then two (in turn), training
under ``spotsafe.Run`` from a StatefulDataLoader with two worker processes against the local
S3-API server; the launcher gets a SIGTERM at a random moment of the training. Each trial
counts whether the final save was made (the newest checkpoint holds the last step trained),
the steps lost (trained, not saved) and whether the exit code tells the truth: 75 when the
ranks stopped after their final save, 0 when training had ended, a failure code otherwise.
The last line is one JSON object.

    python benchmarks/loader_sigterms.py train --checkpoint-uri URI [--steps N]
        [--at-step N --send launcher|group|kill] [--out FILE]

is one rank of that training, under spotsafe-run or alone (tests/spotsafe/test_loader_signals.py
runs it). Rank 0 prints ``trained N`` once step N's work is done. With --at-step it sends,
inside that step, a SIGTERM to its launcher or to its own process group (as torchrun's agent,
``tini -g`` and dumb-init do), or a SIGKILL to the launcher and every process under it (the node
gone), then finishes the step. At the end rank 0 writes the model's and optimizer's state
dicts to --out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spotsafe.preemption import EXIT_PREEMPTED

SPOTSAFE_RUN = str(Path(sys.executable).parent / "spotsafe-run")
# As the Job template sets them on AWS: the runtime's deadline and torchrun's wait for its ranks
# after a SIGTERM are the notice (torchrun's own 30 s kills ranks still tearing down).
NOTICE = {"SPOTSAFE_SIGTERM_GRACE_S": "120", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "120"}
SAMPLES, BATCH, EVERY = 64, 4, 10  # 16 batches an epoch on one rank, 8 on each of two


def train(argv: list[str]) -> None:
    import spotsafe
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    from torchdata.stateful_dataloader import StatefulDataLoader

    parser = argparse.ArgumentParser(prog="loader_sigterms.py train")
    parser.add_argument("--checkpoint-uri", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--at-step", type=int)
    parser.add_argument("--send", choices=["launcher", "group", "kill"], default="launcher")
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    class Augmented(TensorDataset):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            time.sleep(0.005)  # the augmentation's work, in a worker process
            return x + 0.1 * torch.randn_like(x), y

    torch.set_num_threads(1)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    torch.manual_seed(0)
    dataset = spotsafe.WorkerRNG(Augmented(torch.randn(SAMPLES, 8), torch.randn(SAMPLES, 1)))
    order = {"sampler": DistributedSampler(dataset, seed=0)} if distributed else {"shuffle": True}
    loader = StatefulDataLoader(
        dataset, batch_size=BATCH, num_workers=2, generator=torch.Generator().manual_seed(0),
        **order,
    )  # fmt: skip
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1))
    model = nn.parallel.DistributedDataParallel(net) if distributed else net
    optim = torch.optim.AdamW(net.parameters(), lr=1e-2)
    state = {"model": net, "optim": optim}
    with spotsafe.exit_on_error(), spotsafe.Run(args.checkpoint_uri, state, loader,
                                                 every_steps=EVERY) as run:  # fmt: skip
        for x, y in run.batches(steps=args.steps):
            loss = nn.functional.mse_loss(model(x), y)
            optim.zero_grad()
            loss.backward()
            if run.step + 1 == args.at_step and rank == 0:
                send(args.send)
                time.sleep(0.5)  # the rest of the step: long enough for a worker to die
            optim.step()
            if rank == 0:
                print(f"trained {run.step + 1}", flush=True)
    if rank == 0 and args.out:
        torch.save({"model": net.state_dict(), "optim": optim.state_dict()}, args.out)
    if distributed:
        dist.destroy_process_group()


def send(how: str) -> None:
    """From inside a step: SIGTERM to the launcher (this process's parent under spotsafe-run) or
    to this process's group; or SIGKILL to the launcher and everything under it."""
    if how == "kill":
        time.sleep(1)  # a moment into the step, enough for the last periodic save to land
        kill_tree(os.getppid())
    elif how == "launcher":
        os.kill(os.getppid(), signal.SIGTERM)
    else:
        os.killpg(0, signal.SIGTERM)


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every process under it, as a node that goes takes them all."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(parent, []).append(int(stat.parent.name))
    tree, i = [pid], 0
    while i < len(tree):
        tree += children.get(tree[i], [])
        i += 1
    for member in tree:
        with contextlib.suppress(ProcessLookupError):  # gone meanwhile
            os.kill(member, signal.SIGKILL)


def launch(uri: str, ranks: int, *args: str) -> subprocess.Popen:
    """spotsafe-run with `ranks` ranks of this file's training, in a session of its own."""
    return subprocess.Popen(
        [SPOTSAFE_RUN, "--standalone", f"--nproc-per-node={ranks}", __file__, "train",
         "--checkpoint-uri", uri, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **NOTICE},
        start_new_session=True,
    )  # fmt: skip


def committed_step(uri: str) -> int | None:
    """The step of the run's newest checkpoint that verifies, None if it has none."""
    from spotsafe import Checkpointer

    candidates = Checkpointer(uri, read_only=True).candidates()
    return candidates[0].step if candidates else None


def training_span_s(uri: str, ranks: int, steps: int) -> float:
    """Seconds from the first step's end to the last's, in a training left alone."""
    proc = launch(uri, ranks, "--steps", str(steps))
    ends = [time.monotonic() for line in proc.stdout if line.startswith("trained")]
    assert proc.wait() == 0 and len(ends) == steps, proc.stderr.read()
    return ends[-1] - ends[0]


def trial(uri: str, ranks: int, steps: int, after_s: float) -> dict:
    """One training, its launcher sent a SIGTERM `after_s` seconds after its first step."""
    proc = launch(uri, ranks, "--steps", str(steps))
    first = proc.stdout.readline()
    time.sleep(after_s)
    signalled = proc.poll() is None
    if signalled:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    reached = max(map(int, re.findall(r"^trained (\d+)$", first + out, re.M)), default=0)
    saved = committed_step(uri) or 0
    noticed = "termination notice" in err  # a rank took the SIGTERM during its training
    crashed = "Traceback" in err
    if saved == reached and not crashed:  # stopped (75) or finished (0), nothing lost
        right = {EXIT_PREEMPTED} if reached < steps else {0, EXIT_PREEMPTED} if noticed else {0}
    else:  # a failure, whatever it is
        right = set(range(1, 256)) - {EXIT_PREEMPTED}
    return {
        "ranks": ranks,
        "after_s": round(after_s, 3),
        "in_training": signalled and (noticed or reached < steps),
        "final_save": bool(re.search(rf"final save at step {reached} durable", err)),
        "reached": reached,
        "saved": saved,
        "code": proc.returncode,
        "wrong_code": proc.returncode not in right,
        "worker_killed": "is killed by signal" in err,
        "crashed": crashed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=1, help="trials run at a time")
    args = parser.parse_args()
    from spotsafe.local.servers import LOCAL_AWS_ENV, s3_server

    pick = random.Random(args.seed)
    with s3_server() as endpoint:
        os.environ.update(LOCAL_AWS_ENV, AWS_ENDPOINT_URL=endpoint)
        import boto3

        boto3.client("s3").create_bucket(Bucket="trials")
        span = {ranks: training_span_s(f"s3://trials/span-{ranks}", ranks, args.steps)
                for ranks in (1, 2)}  # fmt: skip
        moments = [(1 + n % 2, pick.uniform(0, span[1 + n % 2])) for n in range(args.trials)]

        def one(ranks: int, after_s: float) -> dict:
            result = trial(f"s3://trials/{uuid.uuid4().hex}", ranks, args.steps, after_s)
            print(json.dumps(result), flush=True)  # a trial's line, as it ends
            return result

        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(one, *zip(*moments, strict=True)))
    stopped = [r for r in results if r["in_training"]]
    summary = {
        "trials": len(results),
        "sigterms_in_training": len(stopped),
        "final_saves": sum(r["final_save"] for r in stopped),
        "steps_lost": sum(r["reached"] - r["saved"] for r in results),
        "wrong_exit_codes": sum(r["wrong_code"] for r in results),
        "worker_deaths": sum(r["worker_killed"] for r in results),
        "crashes": sum(r["crashed"] for r in results),
    }
    print(
        f"{summary['sigterms_in_training']} SIGTERMs inside training of {summary['trials']} "
        f"runs: {summary['final_saves']} final saves, {summary['steps_lost']} steps lost, "
        f"{summary['wrong_exit_codes']} wrong exit codes"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    if sys.argv[1:2] == ["train"]:
        train(sys.argv[2:])
    else:
        main()
