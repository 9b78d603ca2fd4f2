"""One drill from start to finish: servers up, references, the platform arm, the baseline arm
on the same interruption schedule, the memory tier's part when asked for, the report."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import boto3
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from spotsafe.local.servers import LOCAL_AWS_ENV, s3_server

from spotctl.drill import report as reporting
from spotctl.drill.baseline import BaselineDrill
from spotctl.drill.config import DrillConfig
from spotctl.drill.harness import Drill, Event, Outcome, reference_runs
from spotctl.drill.memory_tier import run_part

BUCKET = "drill"


def run_drill(config: DrillConfig, out: Path, json_path: Path | None, console: Console) -> dict:
    logs = out / "pods"
    logs.mkdir(parents=True, exist_ok=True)
    with s3_server() as endpoint:
        env = {**LOCAL_AWS_ENV, "AWS_ENDPOINT_URL": endpoint}
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=LOCAL_AWS_ENV["AWS_DEFAULT_REGION"],
            aws_access_key_id=LOCAL_AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        ).create_bucket(Bucket=BUCKET)
        console.print(f"S3-API server at {endpoint}; pod logs in {logs}")

        drill = Drill(config, f"s3://{BUCKET}", env, logs)
        with console.status("reference runs: each job once, uninterrupted"):
            references = reference_runs([j.spec for j in drill.jobs], f"s3://{BUCKET}", env)
        for job in drill.jobs:
            job.reference_sha256 = references[job.name]
        console.print("platform arm")
        outcome = _run_arm(drill, config, console)
        baseline_outcome = None
        if config.baseline_job_count:
            console.print(
                f"baseline arm: the same interruption schedule, restarts by hand after "
                f"{config.manual_delay_s:g} s"
            )
            baseline = BaselineDrill(config, f"s3://{BUCKET}/baseline", env, logs / "baseline")
            baseline_outcome = _run_arm(baseline, config, console)
        memory_tier = None
        if config.memory_tier:
            with tempfile.TemporaryDirectory(prefix="spotctl-drill-nodes-") as nodes:
                memory_tier = run_part(
                    config, f"s3://{BUCKET}/memory-tier", env, Path(nodes), console.print
                )

    report = reporting.build(outcome, config, baseline_outcome, memory_tier)
    chart = out / "timeline.png"
    arms = [("platform", outcome)]
    if baseline_outcome is not None:
        arms.append(("baseline", baseline_outcome))
    compared = report["comparison"] if baseline_outcome is not None else None
    reporting.timeline(arms, chart, config.stockout_s, compared)
    for table in reporting.tables(report):
        console.print(table)
    console.print(f"timeline: {chart}")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"report: {json_path}")
    return report


def _run_arm(drill: Drill, config: DrillConfig, console: Console) -> Outcome:
    """Run one arm with a progress bar per job and its events printed as they come."""
    drill.logs.mkdir(parents=True, exist_ok=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        tasks = {j.name: progress.add_task(j.name, total=config.steps) for j in drill.jobs}

        def log_event(event: Event) -> None:
            who = f"{event.job} on {event.node}" if event.job else event.node
            progress.console.print(f"{event.kind:>10}  {who}  {event.detail}")

        def refresh(d: Drill) -> None:
            for job in d.jobs:
                run = job.run
                where = "done" if job.finished else run.node.name if run is not None else "queued"
                progress.update(
                    tasks[job.name], completed=job.progress, description=f"{job.name:<7} {where:<8}"
                )

        drill.on_event = log_event
        outcome = drill.run(on_tick=refresh)
        refresh(drill)
    return outcome
