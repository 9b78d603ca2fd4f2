"""SIGTERMs after a run's last step: every one must end the process with the run's exit code.

    python benchmarks/sigterm_exits.py --trials 300

A pod deleted while its script evaluates or exports after the run (or while the interpreter
shuts down) gets a SIGTERM; the README promises the run's exit code for it (0, or 75 after a
notice), never a kill and never a traceback. Each trial is a whole training script: a
``spotsafe.Run`` to its end (every other one stopped by a notice first), an evaluation, the
interpreter's shutdown. A SIGTERM comes at a random moment after the last step, within the
time an unsignalled script takes from there to its exit. The last line is one JSON object:
trials, SIGTERMs delivered before the exit, kills, wrong exit codes, tracebacks.

This process imports torch once and forks each trial from it, so a trial costs its own work
and shutdown rather than a fresh interpreter's start.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time

import spotsafe
import torch


def script(root: str, n: int, preempted: bool, ready: int) -> None:
    """The trial's training script, in the forked child; it ends in the interpreter's exit."""
    out = os.open(f"{root}/log-{n}", os.O_WRONLY | os.O_CREAT)
    os.dup2(out, 1)
    os.dup2(out, 2)
    model = torch.nn.Linear(64, 64)
    try:
        with spotsafe.Run(f"file://{root}/run-{n}", {"model": model}, every_steps=2) as run:
            for _ in run.steps(4):
                model.weight.data.add_(1)
                if preempted and run.step == 2:
                    os.kill(os.getpid(), signal.SIGTERM)  # a notice: the run exits 75
            os.write(ready, b".")  # the last step is done
    except spotsafe.Preempted:
        os.write(ready, b".")
        raise
    for _ in range(20):  # evaluation
        model(torch.randn(32, 64))
    time.sleep(0.5)  # export
    print("evaluated")
    sys.exit(0)


def trial(root: str, n: int, preempted: bool, kill_after: float | None) -> dict:
    """One script, signalled `kill_after` seconds after its last step (None: not at all)."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        script(root, n, preempted, ready_w)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    ready = time.monotonic()
    reaped, status, signalled = 0, 0, False
    if kill_after is not None:
        time.sleep(kill_after)
        reaped, status = os.waitpid(pid, os.WNOHANG)
        signalled = reaped == 0
        if signalled:
            os.kill(pid, signal.SIGTERM)
    if not reaped:
        _, status = os.waitpid(pid, 0)
    with open(f"{root}/log-{n}") as f:
        log = f.read()
    return {
        "expected": 75 if preempted else 0,
        "code": os.waitstatus_to_exitcode(status),  # -15: killed by the SIGTERM
        "signalled": signalled,
        "by_handler": "exiting with" in log,
        "traceback": "Traceback" in log or "Exception ignored" in log,
        "lived_s": time.monotonic() - ready,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    # Objects from before the fork stay out of the children's garbage collections: a child's
    # shutdown then costs its own objects, not a copy of every page of the parent's.
    gc.freeze()
    pick = random.Random(args.seed)
    # Not a TemporaryDirectory: a child leaves through this frame too, and must not remove it.
    root = tempfile.mkdtemp(prefix="sigterm-exits-")
    window = max(trial(root, n, n % 2 == 1, None)["lived_s"] for n in range(4))
    results = [
        trial(root, n, n % 2 == 1, pick.uniform(0, window)) for n in range(4, 4 + args.trials)
    ]
    shutil.rmtree(root)
    signalled = [r for r in results if r["signalled"]]
    summary = {
        "trials": len(results),
        "window_s": round(window, 3),
        "sigterms": len(signalled),
        "exited_by_handler": sum(r["by_handler"] for r in signalled),
        "kills": sum(r["code"] < 0 for r in results),
        "wrong_codes": sum(r["code"] != r["expected"] for r in results),
        "tracebacks": sum(r["traceback"] for r in results),
    }
    print(
        f"{summary['sigterms']} SIGTERMs after the last step of {summary['trials']} runs "
        f"(window {summary['window_s']} s): {summary['kills']} kills, "
        f"{summary['wrong_codes']} wrong exit codes, {summary['tracebacks']} tracebacks"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
