"""python -m spotsafe.bench: see spotsafe.bench for what it measures."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import boto3
import torch

import spotsafe.bench
from spotsafe.bench import memory, saves, sharded
from spotsafe.bench.stats import slope
from spotsafe.errors import EXIT_USAGE, SpotsafeError
from spotsafe.local.servers import LOCAL_AWS_ENV, s3_server

MB = 10**6
# figure: (baseline, the most it may be as a multiple of the baseline)
GOALS = {
    "save_s": ("baseline_upload_s", 1.1),
    "restore_s": ("baseline_restore_s", 1.1),
    "blocked_s": ("memcpy_s", 1.5),
}
SHARDED_BLOCKED_GOAL = 2.0  # x the per-rank memcpy
SHARDED_SAVE_GOAL = 1.1  # x plain uploads of the same shard files
MAX_STEP_OVERHEAD_PCT = 1.0  # with a save every 60 s
PEAK_GOAL = 1.5  # x the state
FULL = {"sweep_mb": [100, 500, 2000], "sharded_mb": 200, "size": "medium"}
LOCAL_FROM_MB = 500  # sweep entries this large run on the local filesystem store (see the doc)
STORES = {"s3": "S3 (moto)", "file": "the local filesystem store"}
SLOPED = ("save_s", "baseline_upload_s", "restore_s", "baseline_restore_s", "blocked_s", "memcpy_s")
FAST = {"sweep_mb": [13, 26], "sharded_mb": 8, "size": "small"}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    plan = {
        **(FAST if args.fast else FULL),
        **({"sweep_mb": args.sweep_mb} if args.sweep_mb else {}),
    }
    torch.set_num_threads(1)
    boto3.client("s3").create_bucket(Bucket=saves.BUCKET)
    stores: dict[str, list[dict[str, Any]]] = {"s3": [], "file": []}
    with tempfile.TemporaryDirectory(prefix="spotsafe-bench-") as root:
        for mb in plan["sweep_mb"]:
            state = saves.mlp_state(mb * MB, args.device)
            name = f"sweep-{mb}mb"
            plain = saves.PlainS3(name) if mb < LOCAL_FROM_MB else saves.PlainFile(Path(root), name)
            entry = saves.measure(state, plain, args.repeats)
            stores[entry["store"]].append(entry)
            del state
            print(f"measured {entry['state_bytes'] / MB:.0f} MB", file=sys.stderr, flush=True)
    sweep = stores["s3"]
    peaks = {kind: memory.peak_extra_bytes(kind, plan["sweep_mb"][0] * MB)["peak_extra_bytes"]
             for kind in ("ours", "baseline")}  # fmt: skip
    cost = saves.save_cost(plan["size"], args.rounds, args.device)
    first = sweep[0]
    return {
        **{k: v for k, v in first.items() if k not in ("spread", "ratio_spread", "store")},
        "step_overhead_pct": round(100 * cost["save_cost_s"] / args.save_every_s, 2),
        "step_overhead_pct_60s": round(100 * cost["save_cost_s"] / 60, 2),
        "save_cost_s": round(cost["save_cost_s"], 3),
        "steps_per_s": round(cost["steps_per_s"], 2),
        "save_every_s": args.save_every_s,
        "peak_extra_bytes": peaks["ours"],
        "baseline_peak_extra_bytes": peaks["baseline"],
        "sweep": sweep,
        "local_sweep": stores["file"],
        "slopes_s_per_gb": {
            store: {
                key: round(
                    slope([e["state_bytes"] / 1e9 for e in entries], [e[key] for e in entries]), 3
                )
                for key in SLOPED
            }
            for store, entries in stores.items()
            if len(entries) > 1
        },
        "sharded": sharded.measure(plan["sharded_mb"] * MB, args.repeats),
    }


def _sizes(text: str) -> list[int]:
    sizes = [int(mb) for mb in text.split(",")]
    if len(sizes) < 2 or min(sizes) < 1:
        raise argparse.ArgumentTypeError("two or more sizes in MB, e.g. 100,500")
    if min(sizes) >= LOCAL_FROM_MB:
        raise argparse.ArgumentTypeError(
            f"one size or more under {LOCAL_FROM_MB} MB, measured on S3"
        )
    return sizes


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def report(figures: dict[str, Any]) -> list[str]:
    lines = []
    for entry in figures["sweep"] + figures["local_sweep"]:
        lines.append(f"state {entry['state_bytes'] / MB:.0f} MB on {STORES[entry['store']]}:")
        for ours, (base, goal) in GOALS.items():
            ratio = entry[ours] / entry[base]
            lo, hi = entry["ratio_spread"][ours]
            noisy = "  (spread wider than the margin: re-run quieter)" if hi - lo > goal - 1 else ""
            lines.append(
                f"  {ours:>10} {entry[ours]:8.4f} s {entry['spread'][ours]}   {base:>18} "
                f"{entry[base]:8.4f} s {entry['spread'][base]}   ratio {ratio:5.2f} "
                f"[{lo:.2f}-{hi:.2f}] (goal <= {goal})  {_verdict(ratio <= goal)}{noisy}"
            )
    for store, slopes in figures["slopes_s_per_gb"].items():
        lines.append(f"growth with state size on {STORES[store]} (s per GB): " + ", ".join(
            f"{k} {v}" for k, v in slopes.items()))  # fmt: skip
    sh = figures["sharded"]
    for rank, (blocked, copy) in enumerate(zip(sh["blocked_s"], sh["memcpy_s"], strict=True)):
        ratio = blocked / copy
        lines.append(
            f"sharded rank {rank}: blocked_s {blocked:.4f} s, memcpy_s {copy:.4f} s, ratio "
            f"{ratio:.2f} (goal <= {SHARDED_BLOCKED_GOAL})  "
            f"{_verdict(ratio <= SHARDED_BLOCKED_GOAL)}"
        )
    ratio = sh["save_s"] / sh["baseline_upload_s"]
    lo, hi = sh["ratio_spread"]["save_s"]
    lines.append(
        f"sharded ({sh['ranks']} ranks, {sh['state_bytes'] / MB:.0f} MB): save_s "
        f"{sh['save_s']:.4f} s {sh['spread']['save_s']}, plain parallel uploads "
        f"{sh['baseline_upload_s']:.4f} s {sh['spread']['baseline_upload_s']}   ratio "
        f"{ratio:5.2f} [{lo:.2f}-{hi:.2f}] (goal <= {SHARDED_SAVE_GOAL})  "
        f"{_verdict(ratio <= SHARDED_SAVE_GOAL)}"
    )
    state = figures["sweep"][0]["state_bytes"]
    ours, base = figures["peak_extra_bytes"], figures["baseline_peak_extra_bytes"]
    lines.append(
        f"peak extra memory over 3 saves: {ours / MB:.0f} MB = {ours / state:.2f}x the state "
        f"(baseline {base / MB:.0f} MB = {base / state:.2f}x; goal <= {PEAK_GOAL}x)  "
        f"{_verdict(ours <= PEAK_GOAL * state)}"
    )
    pct = figures["step_overhead_pct_60s"]
    lines.append(
        f"step overhead {pct:.2f} % with a save every 60 s ({figures['step_overhead_pct']:.2f} % "
        f"every {figures['save_every_s']:g} s): each save costs {figures['save_cost_s']} s of "
        f"training at {figures['steps_per_s']} steps/s (goal <= {MAX_STEP_OVERHEAD_PCT} %)  "
        f"{_verdict(pct <= MAX_STEP_OVERHEAD_PCT)}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m spotsafe.bench", description=spotsafe.bench.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    p.add_argument("--fast", action="store_true", help="small states: every figure, quickly")
    p.add_argument("--repeats", type=int, default=5, help="timed repetitions per figure")
    p.add_argument("--rounds", type=int, default=5, help="saves timed for the step overhead")
    p.add_argument("--save-every-s", type=float, default=10.0)
    p.add_argument("--sweep-mb", type=_sizes, help="the sweep's state sizes, e.g. 100,500,2000")
    p.add_argument("--device", default="cpu", help="where the sweep's and trainer's state live")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.rounds < 1:
        p.error("--repeats and --rounds must be >= 1")
    os.environ.update(LOCAL_AWS_ENV)
    try:
        with s3_server(niceness=10) as endpoint:
            os.environ["AWS_ENDPOINT_URL"] = endpoint
            figures = measure(args)
    except SpotsafeError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(report(figures)))
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
