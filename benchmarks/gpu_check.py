"""The GPU check: the benchmark and an exact-resume run on one device, in one short run.

    python benchmarks/gpu_check.py [--device cuda] [--fast]

The exact-resume run trains the example trainer uninterrupted, then again in two halves (the
second resumes from the first's checkpoint: pinned-memory staging on the way out, model,
AdamW, CUDA RNG and data position on the way back), with deterministic kernels, and compares the
final weights bit for bit. Prints the benchmark's figures and the verdict; exits 1 on a
mismatch, 2 when the device is missing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

import torch

STEPS = 60


def trainer(device: str, uri: str, steps: int) -> dict:
    """Run the example trainer; its JSON result."""
    out = subprocess.run(
        [sys.executable, "-m", "spotsafe.examples.train", "--steps", str(steps),
         "--every-steps", "10", "--checkpoint-uri", uri, "--device", device],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out.strip().splitlines()[-1])


def exact_resume(device: str) -> tuple[dict, dict]:
    """(uninterrupted, resumed): the same run once straight through, once in two halves."""
    with tempfile.TemporaryDirectory() as root:
        reference = trainer(device, f"file://{root}/reference", STEPS)
        trainer(device, f"file://{root}/halves", STEPS // 2 + 3)
        resumed = trainer(device, f"file://{root}/halves", STEPS)
    return reference, resumed


def mismatch(reference: dict, resumed: dict) -> str | None:
    """Why the resumed run is not the uninterrupted one, or None when it is."""
    if resumed["resumed_from"] != STEPS // 2 + 3:
        return f"resumed from {resumed['resumed_from']}, not step {STEPS // 2 + 3}"
    if resumed["weights_sha256"] != reference["weights_sha256"]:
        return (
            f"weights differ: {resumed['weights_sha256'][:16]} after resume, "
            f"{reference['weights_sha256'][:16]} uninterrupted"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda")
    p.add_argument("--fast", action="store_true", help="the benchmark's small states")
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"error: no CUDA device visible to torch {torch.__version__}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda"):
        print(f"device: {torch.cuda.get_device_name()}", flush=True)
    bench = [sys.executable, "-m", "spotsafe.bench", "--device", args.device]
    subprocess.run(bench + (["--fast"] if args.fast else []), check=True)
    problem = mismatch(*exact_resume(args.device))
    print(f"exact resume on {args.device}: {problem or 'bitwise identical'}", flush=True)
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
