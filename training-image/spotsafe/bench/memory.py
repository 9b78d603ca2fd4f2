"""Peak extra host memory of three saves, ours or the baseline's, each in a fresh process.

    python -m spotsafe.bench.memory ours|baseline STATE_BYTES

A fresh process per kind keeps memory the allocator retained from one from hiding the other's
peak. The peak is the kernel's high-water mark of resident memory (VmHWM), reset just before
the saves, less the resident memory before them. Prints one JSON line.
"""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys

import boto3

from spotsafe import Checkpointer
from spotsafe.bench.saves import BUCKET, mlp_state, plain_upload

SAVES = 3


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+) kB", f.read())[1]) * 1024


def peak_extra_bytes(kind: str, state_bytes: int) -> dict[str, int]:
    """Run the measurement in a child process: its figures."""
    out = subprocess.run(
        [sys.executable, "-m", "spotsafe.bench.memory", kind, str(state_bytes)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def main(kind: str, state_bytes: int) -> None:
    state = mlp_state(state_bytes)
    if kind == "ours":
        ckpt = Checkpointer(f"s3://{BUCKET}/memory", keep_last=2)

        def save(step: int) -> None:
            ckpt.save(step, state)
            ckpt.wait()
    else:
        s3 = boto3.client("s3")

        def save(step: int) -> None:
            plain_upload(s3, state, "memory-baseline/state.pt")

    gc.collect()
    before = _status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
    for step in range(SAVES):
        save(step)
    peak = _status_bytes("VmHWM") - before
    print(json.dumps({"peak_extra_bytes": peak}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
