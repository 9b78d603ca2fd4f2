"""Speed of the offline operations on the prod stacks, beside a one-bucket baseline program.

    python benchmarks/ops.py [--stack prod --stack gcp-prod]

The baseline is a program with a single S3 bucket run through the same mock engine and the same
policy pack: it is the fixed cost (interpreter, SDK imports, plugin start) that every run pays on
this machine, so the ratios say what the stack itself adds. `review_s` is `spotctl review` end to
end over every stack of the repository, beside the baseline's preview plus policy verdict (the
fixed cost of one stack). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from components.versions import KUBERNETES_VERSION
from spotctl.preview.analyzer import check_preview
from spotctl.preview.resources import preview_program
from spotctl.render.manifests import render, scheduling_problems, validate

REPO_ROOT = Path(__file__).resolve().parents[1]
PACK_DIR = REPO_ROOT / "policies"
CRD_DIR = REPO_ROOT.parent / "shared" / "schemas"
GOALS_S = {
    "preview_s": 10.0,
    "preview_cpu_s": 10.0,
    "render_validate_s": 20.0,
    "policy_verdict_s": 10.0,
    "review_s": 30.0,
}

BASELINE_PROGRAM = {
    "Pulumi.yaml": "name: baseline\nruntime: python\n",
    "Pulumi.bench.yaml": "config:\n  aws:region: us-west-2\n",
    "__main__.py": "import pulumi_aws as aws\n\naws.s3.Bucket('baseline')\n",
}


def timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


def child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(program: Path, stack: str, with_render: bool) -> dict[str, float]:
    cpu_before = child_cpu_s()
    resources, preview_s = timed(preview_program, program, stack)
    # CPU seconds the preview's interpreter used: what the wall time would be on an idle machine.
    preview_cpu_s = child_cpu_s() - cpu_before
    _, policy_s = timed(check_preview, PACK_DIR, program, stack, resources)
    figures = {
        "resources": len(resources),
        "preview_s": preview_s,
        "preview_cpu_s": preview_cpu_s,
        "policy_verdict_s": policy_s,
    }
    if with_render:
        rendered, render_s = timed(render, resources)
        # What `render --validate` checks: schemas, defaults and CEL rules, then device plugins.
        (problems, _), validate_s = timed(
            validate, rendered.all_objects(), KUBERNETES_VERSION, [CRD_DIR]
        )
        unserved, scheduling_s = timed(scheduling_problems, rendered)
        problems += unserved
        if problems:
            raise SystemExit(f"the {stack} render does not validate: {problems[:3]}")
        figures["render_validate_s"] = preview_s + render_s + validate_s + scheduling_s
    return figures


def review_s() -> float:
    """`spotctl review` over the repository's stacks, as the team runs it."""
    spotctl = Path(sys.executable).parent / "spotctl"
    with tempfile.TemporaryDirectory(prefix="ops-bench-review-") as out:
        command = [str(spotctl), "review", "--out", out]
        result, seconds = timed(lambda: subprocess.run(command, capture_output=True))
    if result.returncode not in (0, 3):
        raise SystemExit(f"spotctl review failed: {result.stderr.decode()[-2000:]}")
    return seconds


def print_table(title: str, figures: dict[str, float], baseline: dict[str, float]) -> None:
    table = Table(title=title)
    for column in ("figure", "measured s", "baseline s", "ratio", "goal s"):
        table.add_column(column, justify="right")
    for figure, goal in GOALS_S.items():
        if figure not in figures:
            continue
        base = baseline.get(figure, baseline["preview_s"])
        table.add_row(
            figure,
            f"{figures[figure]:.2f}",
            f"{base:.2f}",
            f"{figures[figure] / base:.2f}",
            f"{goal:g}",
        )
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stack", action="append", help="A stack to measure (default: prod and gcp-prod)."
    )
    args = parser.parse_args()
    stacks = args.stack or ["prod", "gcp-prod"]

    with tempfile.TemporaryDirectory(prefix="ops-bench-") as tmp:
        for name, text in BASELINE_PROGRAM.items():
            (Path(tmp) / name).write_text(text)
        baseline = measure(Path(tmp), "bench", with_render=False)
    figures = {name: measure(REPO_ROOT, name, with_render=True) for name in stacks}
    review = {"review_s": review_s()}
    baseline["review_s"] = baseline["preview_s"] + baseline["policy_verdict_s"]

    for name, stack in figures.items():
        title = f"offline operations on stack {name!r} ({stack['resources']} resources)"
        print_table(title, stack, baseline)
    print_table("spotctl review over every stack", review, baseline)
    print(json.dumps({"stacks": figures, **review, "baseline": baseline, "goals_s": GOALS_S}))


if __name__ == "__main__":
    main()
