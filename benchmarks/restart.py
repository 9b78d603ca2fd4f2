"""What a restarted pod pays before its first step, phase by phase: three ways in one run.

    python benchmarks/restart.py --trials 5 [--busy 3]

The example trainer (spotsafe.examples.train, the drill's pods) leaves a checkpoint on the local
S3-API server; then each trial restarts the run, as a pod does, and times its phases on the
trainer's path: the interpreter, the imports (torch, the trainer, the runtime), torch._dynamo
(every torch.optim optimizer imports it as it is built: Optimizer.add_param_group is wrapped in
torch._disable_dynamo, whose first call imports it, and no setting or optimizer argument skips
that), the model and optimizer, the store opened (the storage library, its client, the attempt
claim), the restore (the Run entered) and the first step. The arms, interleaved trial by
trial: `in-order`, a fresh process that opens the store after the model, as the trainer does;
`overlapped`, one that opens it on a thread while torch._dynamo is imported and the model
built; `standby`, a warm standby: a process that imported all of it and built a throwaway
optimizer before the pod was placed, whose clock starts when it is handed the job. The table
gives each phase's median; the last line is one JSON object with the ratio overlapped /
in-order and the seconds a standby saves a restart. A standby holds a node while it waits, so
it pays only where a pod restarts more often than once in those seconds.

`--busy N` runs N busy-looping processes beside the trials, as the drill's host runs its training
pods on the same cores while a pod starts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager

import boto3
from spotsafe.local.servers import LOCAL_AWS_ENV, s3_server

BUCKET = "restart-bench"
EVERY = 100
MODES = ("in-order", "overlapped", "standby")

# A restarted pod: the trainer's start-up, step by step, with a clock read between steps. A
# fresh process's clock starts with the process (/proc, as the runtime's pod_start does); the
# standby's when a line arrives on its stdin.
POD = """
import sys, time
mode = sys.argv[3]
if mode == "standby":
    import numpy, torch, torch._dynamo, spotsafe.examples.train, spotsafe.run, spotsafe.storage.s3
    torch.optim.AdamW(torch.nn.Linear(1, 1).parameters())
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    marks = {}
else:
    from spotsafe.goodput import process_age_s
    marks = {"interpreter": process_age_s()}
    t0 = time.monotonic() - marks["interpreter"]
mark = lambda name: marks.__setitem__(name, time.monotonic() - t0)
import numpy, torch
import spotsafe.examples.train as trainer
from concurrent.futures import ThreadPoolExecutor
from spotsafe import Checkpointer, Run
mark("imports")
torch.set_num_threads(1)
cfg = trainer.TrainConfig(int(sys.argv[1]), sys.argv[2], every_steps=int(sys.argv[4]))
if mode != "in-order":
    opener = ThreadPoolExecutor(1)
    opening = opener.submit(Checkpointer, cfg.checkpoint_uri, every_steps=cfg.every_steps)
import torch._dynamo  # what building the optimizer would import: timed on its own
mark("torch._dynamo")
model, state = trainer.make_state(cfg)
mark("model and optimizer")
if mode == "in-order":
    ckpt = Checkpointer(cfg.checkpoint_uri, every_steps=cfg.every_steps)
else:
    ckpt = opening.result()
mark("store opened")
run = Run(ckpt, state).__enter__()
mark("restore")
steps = run.steps(cfg.steps)
next(steps)
trainer.train_step(cfg, model, state)
next(steps, None)
mark("first step")
run.__exit__(None, None, None)
print(__import__("json").dumps(marks), flush=True)
"""


def restart(steps: int, uri: str, env: dict[str, str], mode: str) -> dict[str, float]:
    """One restart of the run to `steps`: cumulative seconds at the end of each phase."""
    argv = [sys.executable, "-c", POD, str(steps), uri, mode, str(EVERY)]
    with subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as pod:
        if mode == "standby":
            assert pod.stdout.readline().strip() == "ready"
            pod.stdin.write("go\n")
            pod.stdin.flush()
        out, _ = pod.communicate(timeout=300)
    if pod.returncode != 0:
        raise RuntimeError(f"the {mode} restart exited {pod.returncode}")
    return json.loads(out.strip().splitlines()[-1])


@contextmanager
def busy(n: int):
    """n processes that spin on the CPU, as training pods do beside a starting one."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def phases(marks: dict[str, float]) -> dict[str, float]:
    """Each phase's own seconds, from the cumulative marks."""
    split, before = {}, 0.0
    for name, at in marks.items():
        split[name], before = at - before, at
    return split


def medians(trials: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(t[name] for t in trials) for name in trials[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3, help="restarts per arm")
    parser.add_argument("--busy", type=int, default=0, help="busy processes beside the trials")
    args = parser.parse_args()
    with ExitStack() as stack:
        endpoint = stack.enter_context(s3_server())
        os.environ.update(LOCAL_AWS_ENV, AWS_ENDPOINT_URL=endpoint)
        env = {**os.environ, "SPOTSAFE_NOTICE_SOURCES": "sigterm"}
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        uri = f"s3://{BUCKET}/run"
        trainer = [sys.executable, "-m", "spotsafe.examples.train", "--checkpoint-uri", uri]
        subprocess.run(
            [*trainer, "--steps", str(EVERY), "--every-steps", str(EVERY)],
            env=env,
            check=True,
            capture_output=True,
        )
        stack.enter_context(busy(args.busy))
        arms: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        steps = EVERY
        for _ in range(args.trials):
            for mode, trials in arms.items():  # alternated: both meet the same load
                steps += 1
                started = time.monotonic()
                trials.append(phases(restart(steps, uri, env, mode)))
                print(f"{mode} restart: {time.monotonic() - started:.1f} s", file=sys.stderr)
    split = {mode: medians(trials) for mode, trials in arms.items()}
    total = {mode: sum(phase.values()) for mode, phase in split.items()}
    print(f"{'phase':>20}" + "".join(f"  {mode:>10}" for mode in MODES))
    for name in split["in-order"]:
        print(f"{name:>20}" + "".join(f"  {split[m].get(name, 0.0):10.2f}" for m in MODES))
    print(f"{'to first step':>20}" + "".join(f"  {total[m]:10.2f}" for m in MODES))
    base = total["in-order"]
    saved = total["overlapped"] - total["standby"]
    print(
        f"overlapped / in-order: {total['overlapped'] / base:.2f}x; a standby saves a further "
        f"{saved:.2f} s a restart, holding a node while it waits: it pays only where that node's "
        f"pod restarts more often than every {saved:.1f} s"
    )
    figures = {"busy": args.busy, "trials": args.trials, "phases_s": split}
    figures |= {"to_first_step_s": total, "overlapped_over_in_order": total["overlapped"] / base}
    figures["standby_saves_s"] = saved
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
