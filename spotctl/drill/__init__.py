"""`spotctl drill`: the local recovery drill, on an embedded default that runs in a few minutes.

Real trainers, real preemption notices through per-node metadata servers, a real S3-API server;
then a baseline arm that meets the same interruption schedule without the platform. With
`--cloud-run STACK`, the monthly cloud drill instead (cloud_run.py): spot nodes of one class taken
away on real capacity, the report from the cluster's goodput ledger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spotctl.drill.config import GKE_PERCENT, RECOVERY_S, CloudRun, DrillConfig, Prices
from spotctl.options import ProgramOption, choices
from spotctl.outputs import ForceOption, OutputDirectory, OutputError, fail, output_file

D = DrillConfig
Size = choices("Size", ("small", "medium"))
NoticeSources = choices("NoticeSources", ("any", "gcp"))


def command(
    seed: Annotated[int, typer.Option(help="Seeds the preemption schedule and the jobs.")] = D.seed,
    jobs: Annotated[int, typer.Option(help="Training jobs to run.")] = D.jobs,
    steps: Annotated[int, typer.Option(help="Steps per job.")] = D.steps,
    every_steps: Annotated[int, typer.Option(help="Checkpoint every K steps.")] = D.every_steps,
    size: Annotated[Size, typer.Option(help="Example model size.")] = D.size,
    spot_nodes: Annotated[int, typer.Option(help="Nodes in the spot pool.")] = D.spot_nodes,
    on_demand_nodes: Annotated[
        int, typer.Option(help="Nodes in the on-demand pool.")
    ] = D.on_demand_nodes,
    notices_per_min: Annotated[
        float, typer.Option(help="Preemptions with notice per minute over the spot pool.")
    ] = D.notices_per_min,
    notice_s: Annotated[
        float, typer.Option(help="Notice window before a node is reclaimed.")
    ] = D.notice_s,
    hard_kills: Annotated[
        int, typer.Option(help="Preemptions with no notice (SIGKILL).")
    ] = D.hard_kills,
    hard_kill_window_s: Annotated[
        tuple[float, float], typer.Option(help="Seconds after the start between which they fall.")
    ] = D.hard_kill_window_s,
    on_demand_after_s: Annotated[
        float, typer.Option(help="Wait for spot this long before taking on-demand.")
    ] = D.on_demand_after_s,
    stockout_s: Annotated[
        tuple[float, float] | None,
        typer.Option(help="Seconds after the start between which spot cannot be provisioned."),
    ] = D.stockout_s,
    cloud: Annotated[
        NoticeSources,
        typer.Option(help="Notices of the spot pool: any (every path in turn) or gcp (GCE only)."),
    ] = D.cloud,
    final_phase: Annotated[
        float, typer.Option(help="Share of a job's last steps to run on on-demand.")
    ] = D.final_phase,
    spot_price: Annotated[float, typer.Option(help="USD per spot node-hour.")] = Prices.spot,
    on_demand_price: Annotated[
        float, typer.Option(help="USD per on-demand node-hour.")
    ] = Prices.on_demand,
    timeout_s: Annotated[
        float,
        typer.Option(help="Give up on an arm once no job's step advanced for this many seconds."),
    ] = D.timeout_s,
    baseline_jobs: Annotated[
        int | None,
        typer.Option(
            help="Jobs of the baseline arm, run without the platform on the same interruption "
            "schedule (default: --jobs; 0: no baseline arm)."
        ),
    ] = D.baseline_jobs,
    manual_delay_s: Annotated[
        float,
        typer.Option(help="Baseline arm: seconds until someone restarts a pod that died."),
    ] = D.manual_delay_s,
    memory_tier: Annotated[
        bool,
        typer.Option(
            "--memory-tier",
            help="Also measure the memory tier: hard kills of a two-node job, with the durable "
            "tier alone and with a memory save every --memory-every-steps.",
        ),
    ] = D.memory_tier,
    node_losses: Annotated[
        int, typer.Option(help="--memory-tier: losses of one node, beside one loss of both.")
    ] = D.node_losses,
    memory_every_steps: Annotated[
        int, typer.Option(help="--memory-tier: a memory save every K steps.")
    ] = D.memory_every_steps,
    out: Annotated[Path, typer.Option(help="Directory for pod logs and timeline.png.")] = Path(
        "out/drill"
    ),
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON report here.")
    ] = None,
    force: ForceOption = False,
    cloud_run: Annotated[
        str | None,
        typer.Option(
            "--cloud-run",
            help="Instead of the local drill: take spot nodes of one class of this stack away "
            "on its cloud (EKS: its FIS template; GKE: simulated maintenance on Spot VMs).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="--cloud-run: print what it would do; touch nothing.")
    ] = False,
    prometheus: Annotated[
        str | None,
        typer.Option(help="--cloud-run: URL of the cluster's Prometheus (e.g. a port-forward)."),
    ] = None,
    recovery_s: Annotated[
        float,
        typer.Option(help="--cloud-run: seconds the runs have to recover after the interruptions."),
    ] = RECOVERY_S,
    gpu_class: Annotated[
        str | None,
        typer.Option(help="--cloud-run on GKE: the class whose Spot VMs go (default: the first)."),
    ] = None,
    percent: Annotated[
        int | None,
        typer.Option(help=f"--cloud-run on GKE: share of them, in % (default {GKE_PERCENT})."),
    ] = None,
    program: ProgramOption = None,
) -> None:
    """Run training jobs on an emulated spot pool, preempt them, and measure the recovery; with
    --cloud-run, take a deployed stack's spot nodes away and report from its goodput ledger."""
    from rich.console import Console

    from spotctl.drill.run import run_drill

    if cloud_run is not None:
        run = CloudRun(cloud_run, prometheus, recovery_s, gpu_class, percent)
        _cloud(run, dry_run, json_path, program)
        return
    if dry_run:
        raise fail(OutputError("--dry-run goes with --cloud-run: the local drill touches no cloud"))

    try:
        config = DrillConfig(
            seed=seed,
            jobs=jobs,
            steps=steps,
            every_steps=every_steps,
            size=size,
            spot_nodes=spot_nodes,
            on_demand_nodes=on_demand_nodes,
            notices_per_min=notices_per_min,
            notice_s=notice_s,
            hard_kills=hard_kills,
            hard_kill_window_s=hard_kill_window_s,
            on_demand_after_s=on_demand_after_s,
            stockout_s=stockout_s,
            cloud=cloud,
            final_phase=final_phase,
            timeout_s=timeout_s,
            prices=Prices(spot=spot_price, on_demand=on_demand_price),
            baseline_jobs=baseline_jobs,
            manual_delay_s=manual_delay_s,
            memory_tier=memory_tier,
            node_losses=node_losses,
            memory_every_steps=memory_every_steps,
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    try:
        target = OutputDirectory(out, "--out", force)
        if json_path is not None:
            output_file(json_path, "--json")
    except OutputError as exc:
        raise fail(exc) from None
    console = Console()
    target.clear()
    try:
        report = run_drill(config, out, json_path, console)
    except (RuntimeError, TimeoutError, OSError) as e:
        console.print(f"[red]drill failed:[/red] {e}")
        raise typer.Exit(1) from None
    finally:
        # The report too, when it lies in --out: a rerun with the same flags replaces it.
        written = [*target.files_under("pods"), *out.glob("timeline.png")]
        if json_path is not None and json_path.resolve().is_relative_to(out.resolve()):
            written += [json_path] if json_path.is_file() else []
        target.record(written)
    # Goals are reported; a job that did not recover exactly fails the drill, and so does a
    # planner whose prediction misses what the drill measured, or a memory tier that did not
    # hold a kill it could.
    check, goals = report["planner_check"], report["goals"]
    if (
        not all(j["finished"] for j in report["jobs"])
        or not goals["weights_match_references"]
        or (check is not None and not check["within_tolerance"])
        or goals["memory_tier_kills_missed"]
        or goals["memory_tier_weights_match_reference"] is False
    ):
        raise typer.Exit(1)


def _cloud(run: CloudRun, dry_run: bool, json_path: Path | None, program: Path | None) -> None:
    """The cloud drill: a bad input is one line and exit 2, a cloud that fails it exit 1."""
    from rich.console import Console

    from components.config.files import ProgramInputError, find_program
    from spotctl.drill.cloud import CloudRunError
    from spotctl.drill.cloud_run import CloudRunInputError, cloud_drill
    from spotctl.drill.ledger import PrometheusError

    try:
        if json_path is not None:
            output_file(json_path, "--json")
        program = program or find_program(Path.cwd())
    except (OutputError, ProgramInputError) as exc:
        raise fail(OutputError(str(exc))) from None
    try:
        cloud_drill(run, dry_run, json_path, Console(), program)
    except (CloudRunInputError, ProgramInputError) as exc:
        raise fail(OutputError(str(exc))) from None
    except (CloudRunError, PrometheusError) as exc:
        typer.echo(f"cloud drill failed: {exc}", err=True)
        raise typer.Exit(1) from None
