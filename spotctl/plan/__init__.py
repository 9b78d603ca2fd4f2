"""`spotctl plan`: the checkpoint interval, goodput and cost of a training job on spot nodes.

From a state size (or measured save and restore costs), an interruption rate, the cloud's notice,
the step time, the prices and the job's length it plans the checkpoint interval and says what
spot costs against on-demand, as ratios and in dollars. With `--stack` and `--class` the instance
type, region, notice, prices and interruption band come from the stack and the provider data
table (policies/provider-data.yaml); `planned_interval` gives a stack's class's interval to code
that writes jobs. The model is in `spotctl.plan.model`, the costs in `spotctl.plan.costs`, the
stack's class in `spotctl.plan.stack_class`, the report in `spotctl.plan.report`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from spotctl.drill.config import Prices
from spotctl.options import ProgramOption, choices
from spotctl.outputs import OutputError, fail, output_file
from spotctl.plan import costs, tiers
from spotctl.plan.model import HOUR_S, Scenario, SpotJob, expected, interval_s
from spotctl.plan.node_start import (
    CACHE,
    CLOUDS_OF,
    IMAGE_MECHANISMS,
    PULL,
    STACK_SETTING,
    STREAM,
    TRAINING_IMAGE_GB,
    NodeStart,
)
from spotctl.plan.report import CAUSE_INPUTS
from spotctl.plan.stack_class import ClassOffer, StackClassError, resolve
from spotctl.provider_data import DATA_FILE, ProviderDataError
from spotctl.provider_data import read as read_provider_data

if TYPE_CHECKING:
    from components.config import StackConfig

# AWS Spot Instance Advisor's "frequency of interruption": the share of a type's capacity
# reclaimed over the trailing month. Each band is taken at its upper edge; ">20%" has none.
BANDS = {"<5%": 0.05, "5-10%": 0.10, "10-15%": 0.15, "15-20%": 0.20, ">20%": 0.50}
HOURS_PER_MONTH = 730.0
# Llama 3 (Dubey et al., 2024, section 3.3.4): 419 unexpected interruptions in 54 days on
# 16,384 H100 GPUs, 2,048 nodes of 8; none came with a notice.
FAILURES_PER_NODE_HOUR = 419 / (54 * 24 * 2048)
# Below this the plan's figures stop meaning anything: the job does not finish.
MIN_GOODPUT = 1e-6
# Above this, a rate per node-hour is more likely a share typed in the wrong unit
# (`--interruptions-per-hour 5` for 5 %): no published spot band nor failure rate comes near one
# interruption per node-hour (the Advisor's worst band is about 0.001).
PLAUSIBLE_PER_NODE_HOUR = 1.0
NOTICE_SOURCES = {
    "aws": "EC2 spot interruption notice, two minutes, less the 20 s the drain's SIGTERM may "
    "lag it (EventBridge, SQS, Karpenter), as the runtime plans it",
    "gcp": "GKE graceful node shutdown: 30 s, 15 s of it for user pods by default; the node "
    "shuts its pods down itself, so no lag",
}


MODEL = [
    "interruptions arrive as a Poisson process over paid time, restarts included",
    "a notice stops training at the next step boundary for a final save as long as a save",
    "a final save that does not fit the notice is lost with the node, and so is the work "
    "since the last durable checkpoint, as on a failure",
    "a save blocks training for its snapshot and is durable save_s after it started",
    "the interval counts from the checkpoint a restart resumed from",
    "every interruption of any node stops the whole job; paid time is the job's wall time "
    "on all its nodes",
    "on-demand runs the same job with the same failures and no spot notices, at its own interval",
    "long-run averages: the job spans many intervals and interruptions",
]


# The clouds whose notice the planner knows (NOTICE_SECONDS), named here so `--help` lists them
# without loading the stack schema.
Cloud = choices("Cloud", ("aws", "gcp"))
Band = choices("Band", BANDS)
Image = choices("Image", IMAGE_MECHANISMS)


class PlanError(ValueError):
    """Bad input; the message names the option."""


INPUT_ERRORS = (PlanError, costs.CostError, StackClassError, ProviderDataError)
"""What bad input raises, each a one-line message naming the option or file."""
DEFAULT_JOB_HOURS = 168.0
"""planned_interval's job length when the caller does not know it: a week, which caps the interval
only for jobs whose interruptions lose almost nothing."""


@dataclass(frozen=True)
class Inputs:
    cloud: str | None
    """None: the stack's cloud (--stack is then required)."""
    step_s: float
    job_hours: float
    state_gb: float | None = None
    interruptions_per_hour: float | None = None
    interruption_band: str | None = None
    failures_per_hour: float = FAILURES_PER_NODE_HOUR
    nodes: int = 1
    notice_s: float | None = None
    notice_lag_s: float | None = None
    spot_price: float | None = None
    on_demand_price: float | None = None
    from_bench: Path | None = None
    checkpoint_s: float | None = None
    save_s: float | None = None
    restart_s: float | None = None
    image_gb: float | None = None
    image: str | None = None
    stack: str | None = None
    program: Path | None = None
    gpu_class: str | None = None
    instance_type: str | None = None
    provider_data: Path | None = None
    memory_rank_gb: float | None = None
    memory_copy_gb_per_s: float = costs.HOST_COPY_GB_PER_S
    peer_gbps: float | None = None
    memory_survives: float = tiers.SURVIVES


def scenario(i: Inputs) -> Scenario:
    """Check the inputs and turn them into the model's job; one of INPUT_ERRORS names a bad
    option."""
    settings = _stack_settings(i)
    if i.cloud is None and settings is None:
        raise PlanError("--cloud is required without --stack")
    i = replace(i, cloud=i.cloud or settings.cloud)
    _check(i)
    if settings is not None and settings.cloud != i.cloud:
        raise PlanError(f"--stack {i.stack} is on {settings.cloud}, not {i.cloud}")
    offer = (
        resolve(
            settings,
            i.stack,
            i.gpu_class,
            i.instance_type,
            i.nodes,
            read_provider_data(i.provider_data or DATA_FILE),
        )
        if i.gpu_class is not None
        else None
    )
    measured = costs.read(i.from_bench) if i.from_bench else None
    state_gb = i.state_gb or (measured.state_gb if measured else None)
    if state_gb is None:
        raise PlanError("--state-gb is required" + (" with a drill report" if measured else ""))
    shard_gb = state_gb / i.nodes
    mechanism, mechanism_source = _image(i, settings)
    start = NodeStart(TRAINING_IMAGE_GB if i.image_gb is None else i.image_gb, mechanism)
    base = (measured.at if measured else costs.from_size)(shard_gb, start.total_s)
    blocked = i.checkpoint_s if i.checkpoint_s is not None else base.blocked_s
    save = i.save_s if i.save_s is not None else blocked + base.save_s - base.blocked_s
    if save < blocked:
        raise PlanError(f"--save-s ({save:g} s) must be at least the blocking part ({blocked:g} s)")
    restart = i.restart_s if i.restart_s is not None else base.restart_s
    rate, rate_source = _interruption_rate(i, offer)
    from components.config import NoticeWindow

    default = NoticeWindow.default(i.cloud) if settings is None else settings.notice_window()
    window = NoticeWindow(
        default.grace_s if i.notice_s is None else i.notice_s,
        default.lag_s if i.notice_lag_s is None else i.notice_lag_s,
    )
    if window.final_save_s <= 0:
        raise PlanError(
            f"--notice-lag-s ({window.lag_s:g} s) leaves nothing of the {window.grace_s:g} s "
            "notice for the final save"
        )
    job = SpotJob(
        work_s=i.job_hours * HOUR_S,
        notice_rate=i.nodes * rate / HOUR_S,
        failure_rate=i.nodes * i.failures_per_hour / HOUR_S,
        notice_s=window.final_save_s,
        step_s=i.step_s,
        blocked_s=blocked,
        save_s=save,
        restart_s=restart,
    )
    planned = expected(job, interval_s(job))
    if planned.goodput < MIN_GOODPUT:
        largest = max(planned.badput, key=planned.badput.get)
        raise PlanError(
            f"the job would take over a million times its on-demand time, mostly in "
            f"{largest.replace('_', ' ')}: {CAUSE_INPUTS[largest]}"
        )
    spot, on_demand, price_source = _prices(i, offer)
    assumptions = {
        "cloud": i.cloud,
        "notice_s": window.grace_s,
        "notice_lag_s": window.lag_s,
        "final_save_window_s": window.final_save_s,
        "notice_source": "--notice-s, --notice-lag-s"
        if (i.notice_s, i.notice_lag_s) != (None, None)
        else NOTICE_SOURCES[i.cloud]
        if settings is None
        else f"--stack {i.stack}: its spot pods' notice and the drain's lag",
        "step_s": i.step_s,
        "job_hours": i.job_hours,
        "nodes": i.nodes,
        "state_gb": state_gb,
        "shard_gb": shard_gb,
        "interruptions_per_node_hour": rate,
        "interruption_rate_source": rate_source,
        "failures_per_node_hour": i.failures_per_hour,
        "failure_rate_source": "--failures-per-hour"
        if i.failures_per_hour != FAILURES_PER_NODE_HOUR
        else "Llama 3 (2024): 419 unexpected interruptions in 54 days on 2,048 nodes",
        "blocked_s": blocked,
        "save_s": save,
        "restore_s": base.restore_s,
        "restart_s": restart,
        "overrides": [
            name
            for name, value in (
                ("--checkpoint-s", i.checkpoint_s),
                ("--save-s", i.save_s),
                ("--restart-s", i.restart_s),
            )
            if value is not None
        ],
        **(measured.assumptions() if measured else _size_assumptions()),
        # A new node's start, where the restart derives from it.
        **(
            {**start.assumptions(i.image_gb is not None), "image_from": mechanism_source}
            if i.restart_s is None and not (measured and measured.kind == "drill")
            else {}
        ),
        "spot_price": spot,
        "on_demand_price": on_demand,
        "price_source": price_source,
        "gpus_per_node": offer.gpus_per_node if offer else None,
        **(_class_assumptions(offer) if offer else {}),
        "model": MODEL,
    }
    if i.save_s is not None or (measured and measured.kind == "drill"):
        sized = None
    else:
        sized = partial(measured.at if measured else costs.from_size, node_start_s=start.total_s)
    rank_gb, rank_source = _rank_state(i, state_gb, offer)
    memory = _memory(i, rank_gb, offer)
    if not isinstance(memory, str):
        assumptions.update(_memory_assumptions(i, rank_source, memory, offer))
    return Scenario(job, spot / on_demand, state_gb, i.nodes, sized, assumptions, memory)


def _memory(i: Inputs, rank_gb: float, offer: ClassOffer | None) -> costs.MemoryCosts | str:
    """The memory tier's costs on a node of the job, each rank's snapshot `rank_gb`, or why it
    does not apply."""
    if i.nodes < 2:
        return "needs 2+ nodes: each rank's copy is kept on a peer node"
    if i.peer_gbps is not None:
        peer = i.peer_gbps
    elif offer is None:
        peer = tiers.DEFAULT_PEER_GBPS
    elif offer.network is None:
        raise _no_row(offer, "--peer-gbps", "network figure")
    else:
        peer = offer.network[0]
    return costs.MemoryCosts(
        rank_gb=rank_gb,
        ranks_per_node=offer.gpus_per_node if offer else 1,
        copy_gb_per_s=i.memory_copy_gb_per_s,
        peer_gbps=peer,
        flow_gbps=costs.AWS_FLOW_GBPS if i.cloud == "aws" else None,
        survives=i.memory_survives,
    )


def _rank_state(i: Inputs, state_gb: float, offer: ClassOffer | None) -> tuple[float, str]:
    """What one rank's memory snapshot holds, GB, and where the figure comes from."""
    if i.memory_rank_gb is not None:
        return i.memory_rank_gb, "--memory-rank-gb"
    if offer is None:
        return state_gb, "the whole state: without --class, as DDP keeps it on every rank"
    gpu_gb = offer.gpu_memory_gib * costs.GB_PER_GIB
    return costs.rank_share(state_gb, gpu_gb, i.nodes * offer.gpus_per_node)


def _memory_assumptions(
    i: Inputs, rank_source: str, memory: costs.MemoryCosts, offer: ClassOffer | None
) -> dict:
    return {
        "memory_rank_gb": memory.rank_gb,
        "memory_rank_gb_source": rank_source,
        "memory_ranks_per_node": memory.ranks_per_node,
        "memory_copy_gb_per_s": memory.copy_gb_per_s,
        "memory_copy_gb_per_s_source": "--memory-copy-gb-per-s"
        if i.memory_copy_gb_per_s != costs.HOST_COPY_GB_PER_S
        else "assumed: a node's copy into host memory, as the durable snapshot's",
        "peer_gbps": memory.peer_gbps,
        "peer_gbps_source": "--peer-gbps"
        if i.peer_gbps is not None
        else f"{offer.table}: {offer.instance_type}'s, as published"
        if offer
        else "assumed without --class: g5's 'up to 10 Gbps'",
        "peer_gbps_read_from": offer.network[1] if offer and i.peer_gbps is None else None,
        "flow_gbps": memory.flow_gbps,
        "flow_gbps_source": "EC2: one TCP flow outside a cluster placement group; one per rank"
        if memory.flow_gbps
        else None,
        "memory_survives": memory.survives,
        "memory_survives_source": "--memory-survives"
        if i.memory_survives != tiers.SURVIVES
        else "assumed: most failures without notice take one host (Llama 3, section 3.3.4)",
    }


def _class_assumptions(offer: ClassOffer) -> dict:
    """The stack's class the plan is for, and the table's row for its instance type."""
    row = offer.row
    return {
        "stack": offer.stack,
        "gpu_class": offer.gpu_class,
        "instance_type": offer.instance_type,
        "region": offer.region,
        "capacity_gpus": {"spot": offer.spot_gpus, "on_demand": offer.on_demand_gpus},
        "provider_data": None
        if row is None
        else {
            "band": offer.band,
            "band_source": offer.band_source,
            "spot_price": row.spot,
            "on_demand_price": row.on_demand,
            "read": row.read.isoformat(),
            "sources": list(row.sources),
            "estimate": row.estimate,
        },
    }


def _size_assumptions() -> dict:
    return {"costs_from": "state size at assumed speeds", **costs.SIZE_ASSUMPTIONS}


def _check(i: Inputs) -> None:
    from components.config import NOTICE_SECONDS

    positive = {
        "--step-s": i.step_s,
        "--job-hours": i.job_hours,
        "--state-gb": i.state_gb,
        "--notice-s": i.notice_s,
        "--on-demand-price": i.on_demand_price,
        "--checkpoint-s": i.checkpoint_s,
        "--save-s": i.save_s,
        "--image-gb": i.image_gb,
        "--memory-rank-gb": i.memory_rank_gb,
        "--memory-copy-gb-per-s": i.memory_copy_gb_per_s,
        "--peer-gbps": i.peer_gbps,
    }
    non_negative = {
        "--interruptions-per-hour": i.interruptions_per_hour,
        "--failures-per-hour": i.failures_per_hour,
        "--spot-price": i.spot_price,
        "--restart-s": i.restart_s,
        "--notice-lag-s": i.notice_lag_s,
    }
    for name, value in positive.items():
        if value is not None and not (math.isfinite(value) and value > 0):
            raise PlanError(f"{name} must be a positive number, not {value:g}")
    for name, value in non_negative.items():
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise PlanError(f"{name} must be zero or more, not {value:g}")
    if not (math.isfinite(i.memory_survives) and 0 <= i.memory_survives <= 1):
        raise PlanError(f"--memory-survives must be a share from 0 to 1, not {i.memory_survives:g}")
    if i.cloud not in NOTICE_SECONDS:
        raise PlanError(f"--cloud must be one of {', '.join(NOTICE_SECONDS)}, not {i.cloud!r}")
    if i.image is not None and i.stack is not None:
        raise PlanError("give one of --image and --stack: the stack says how nodes get the image")
    if i.image is not None and i.image not in IMAGE_MECHANISMS:
        raise PlanError(f"--image must be one of {', '.join(IMAGE_MECHANISMS)}, not {i.image!r}")
    if i.image is not None and i.cloud not in CLOUDS_OF[i.image]:
        raise PlanError(
            f"--image {i.image} is not available on {i.cloud} (only on "
            f"{', '.join(CLOUDS_OF[i.image])})"
        )
    if i.nodes < 1:
        raise PlanError(f"--nodes must be at least 1, not {i.nodes}")
    if i.interruptions_per_hour is not None and i.interruption_band is not None:
        raise PlanError("give one of --interruptions-per-hour and --interruption-band")
    if i.gpu_class is None and (i.interruptions_per_hour, i.interruption_band) == (None, None):
        raise PlanError(
            "give one of --interruptions-per-hour and --interruption-band, or --stack and "
            "--class for the class's band"
        )
    if i.gpu_class is not None and i.stack is None:
        raise PlanError("--class needs --stack: a GPU class is a stack's")
    if i.instance_type is not None and i.gpu_class is None:
        raise PlanError("--instance-type needs --class: it picks one of the class's types")
    if i.interruption_band is not None and i.interruption_band not in BANDS:
        raise PlanError(
            f"--interruption-band must be one of {', '.join(BANDS)}, not {i.interruption_band!r}"
        )
    if (i.spot_price is None) != (i.on_demand_price is None):
        raise PlanError("--spot-price and --on-demand-price go together")


def implausible_rates(i: Inputs) -> list[str]:
    """A warning for each rate far above any measured one, saying the unit it was read in."""
    rates = {
        "--interruptions-per-hour": (i.interruptions_per_hour, "spot interruptions"),
        "--failures-per-hour": (i.failures_per_hour, "failures"),
    }
    return [
        f"{option} {value:g} reads as {value:g} {what} per node-hour, one every "
        f"{60 / value:.3g} minutes on each node; no published rate comes near "
        f"{PLAUSIBLE_PER_NODE_HOUR:g}. A share of nodes a month is --interruption-band (e.g. "
        f"5-10%); 5 % of nodes a month is about {-math.log1p(-0.05) / HOURS_PER_MONTH:.2g} per "
        "node-hour"
        for option, (value, what) in rates.items()
        if value is not None and value > PLAUSIBLE_PER_NODE_HOUR
    ]


def _stack_settings(i: Inputs) -> StackConfig | None:
    """The stack's validated config (--stack), or None without one."""
    if i.stack is None:
        return None
    from components.config.files import ProgramInputError, find_program
    from components.config.loading import read_stack

    try:
        return read_stack(i.program or find_program(Path.cwd()), i.stack, "--stack")
    except ProgramInputError as exc:
        raise PlanError(str(exc)) from None


def _image(i: Inputs, settings: StackConfig | None) -> tuple[str, str]:
    """How a new node gets the training image, and where that comes from: --image, the stack's
    settings (--stack), or a plain pull."""
    if settings is None:
        return (i.image, "--image") if i.image else (PULL, "default: a plain pull")
    if settings.gcp is not None and settings.gcp.image_streaming:
        mechanism = STREAM
    elif settings.aws is not None and settings.aws.gpu_ami.image_cache_snapshot:
        mechanism = CACHE
    else:
        mechanism = PULL
    return mechanism, f"--stack {i.stack}: {STACK_SETTING[mechanism]}"


def _interruption_rate(i: Inputs, offer: ClassOffer | None) -> tuple[float, str]:
    """The rate per node-hour and where it comes from: the engineer's (over the table's band,
    which the source then names), or the table's band for the class's instance type."""
    table = (
        f"the table's {offer.band} for {offer.instance_type} in {offer.region}"
        if offer and offer.band
        else None
    )
    if i.interruptions_per_hour is not None:
        return i.interruptions_per_hour, "--interruptions-per-hour" + (
            f", over {table}" if table else ""
        )
    if i.interruption_band is not None:
        band, source = i.interruption_band, f"--interruption-band {i.interruption_band}"
        if table:
            source += f", over {table}"
    elif offer.band is not None:
        band, source = offer.band, f"{offer.band}: {offer.band_source}"
    else:
        raise _no_row(offer, "--interruptions-per-hour")
    share = BANDS[band]
    return band_rate(band), (
        f"{source}: {share:.0%} of nodes interrupted in a month of {HOURS_PER_MONTH:g} h, "
        f"-ln(1 - {share:g}) / {HOURS_PER_MONTH:g}"
        + (" (the band is open; 50 % assumed)" if band == ">20%" else "")
    )


def _no_row(offer: ClassOffer, option: str, what: str = "") -> StackClassError:
    missing = (
        f"{what} for {offer.instance_type}" if what else f"{offer.instance_type} in {offer.region}"
    )
    return StackClassError(
        f"--class {offer.gpu_class}: the provider data table has no {missing}; add "
        f"{'it' if what else 'its row'}, or pass {option}"
    )


def band_rate(band: str) -> float:
    """Interruptions per node-hour of an Advisor band: its share of nodes in a month."""
    return -math.log1p(-BANDS[band]) / HOURS_PER_MONTH


def _prices(i: Inputs, offer: ClassOffer | None) -> tuple[float, float, str]:
    """USD per node-hour, spot and on-demand, and where they come from: the engineer's (over
    the table's row, which the source then names), the table's row for the class's instance
    type, or the drill's defaults."""
    row = offer.row if offer else None
    if i.spot_price is not None:
        return (
            i.spot_price,
            i.on_demand_price,
            "--spot-price, --on-demand-price"
            + (
                f", over the table's ${row.spot:g} spot and ${row.on_demand:g} on-demand for "
                f"{row.instance_type} in {row.region}"
                if row
                else ""
            ),
        )
    if offer is None:
        return Prices.spot, Prices.on_demand, "the drill's defaults: AWS g5.xlarge, us-east-1"
    if row is None:
        raise _no_row(offer, "--spot-price and --on-demand-price")
    return (
        row.spot,
        row.on_demand,
        (
            f"{offer.table}: {row.instance_type} in {row.region}, read {row.read}"
            + (f" (estimate: {row.estimate})" if row.estimate else "")
        ),
    )


@dataclass(frozen=True)
class Planned:
    """A stack's class's plan, for code that writes jobs."""

    interval_s: float
    """Seconds of training between durable saves, the durable tier alone."""
    interval_steps: int
    """The same in steps of `step_s` (the runtime's `every_steps`)."""
    expected_goodput: float
    job: SpotJob
    """The job as the planner saw it: its save, its notice, its step."""
    memory_tier: dict
    """The two tiers (the plan's JSON `memory_tier`): `applies`, and where it does, each tier's
    interval in seconds and steps; else `why`."""
    inputs: dict
    """Every input the plan used, with its source: the instance type, region, interruption rate,
    prices, notice, save and restart costs (the plan's JSON `assumptions`)."""


def planned_interval(
    stack: str,
    gpu_class: str,
    state_gb: float,
    *,
    nodes: int = 1,
    step_s: float = 1.0,
    job_hours: float = DEFAULT_JOB_HOURS,
    instance_type: str | None = None,
    program: Path | None = None,
) -> Planned:
    """The checkpoint interval `spotctl plan --stack STACK --class GPU_CLASS` plans for a job of
    `state_gb` GB of state (model, optimizer, ...) over `nodes` nodes of the class's instance
    type (default: its type with the most GPUs), at the provider data table's interruption band
    and prices for that type in the stack's region, with the stack's notice and the save and
    restart costs the state size implies; on 2+ nodes with the memory tier beside it.

    `step_s` (seconds per step) matters only to whether the last step and the final save fit the
    notice, and to the intervals in steps; `job_hours` only caps the interval. The stack is read
    from `program` (default: the Pulumi project the current directory is in). Bad input raises
    one of INPUT_ERRORS, a one-line message naming the option (`--class`, `--nodes`, ...) as the
    command would.
    """
    from spotctl.plan import report

    planned = scenario(
        Inputs(
            cloud=None,
            step_s=step_s,
            job_hours=job_hours,
            state_gb=state_gb,
            nodes=nodes,
            stack=stack,
            program=program,
            gpu_class=gpu_class,
            instance_type=instance_type,
        )
    )
    result = report.build(planned)
    return Planned(
        result["interval_s"],
        result["interval_steps"],
        result["expected_goodput"],
        planned.job,
        result["memory_tier"],
        result["assumptions"],
    )


def command(
    step_s: Annotated[float, typer.Option(help="Seconds per training step.")],
    job_hours: Annotated[
        float, typer.Option(help="Hours of training the job needs with no interruption.")
    ],
    cloud: Annotated[
        Cloud | None,
        typer.Option(help="Sets the notice a pod gets (default: the --stack's cloud)."),
    ] = None,
    state_gb: Annotated[
        float | None,
        typer.Option(help="Checkpointed state in GB (model, optimizer, ...), over all nodes."),
    ] = None,
    interruptions_per_hour: Annotated[
        float | None, typer.Option(help="Spot interruptions (with notice) per node-hour.")
    ] = None,
    interruption_band: Annotated[
        Band | None,
        typer.Option(help="Instead: AWS Spot Instance Advisor band (nodes interrupted a month)."),
    ] = None,
    failures_per_hour: Annotated[
        float, typer.Option(help="Failures without a notice per node-hour.")
    ] = FAILURES_PER_NODE_HOUR,
    nodes: Annotated[
        int, typer.Option(help="Nodes the job runs on; each saves its shard of the state.")
    ] = 1,
    notice_s: Annotated[
        float | None,
        typer.Option(
            help="Seconds a pod gets from the notice (default: the cloud's; 30 s is "
            "Kubernetes's default grace period; on GKE the Spot pool's shutdown grace for user "
            "pods)."
        ),
    ] = None,
    notice_lag_s: Annotated[
        float | None,
        typer.Option(
            help="Seconds the drain's SIGTERM may follow the notice; the final save has the "
            "notice less this (default: AWS 20, GKE 0)."
        ),
    ] = None,
    spot_price: Annotated[float | None, typer.Option(help="USD per spot node-hour.")] = None,
    on_demand_price: Annotated[
        float | None, typer.Option(help="USD per on-demand node-hour.")
    ] = None,
    from_bench: Annotated[
        Path | None,
        typer.Option(
            help="Measured costs: `python -m spotsafe.bench --json` output, or a "
            "`spotctl drill --json` report."
        ),
    ] = None,
    checkpoint_s: Annotated[
        float | None, typer.Option(help="Seconds a save blocks training (its snapshot).")
    ] = None,
    save_s: Annotated[
        float | None, typer.Option(help="Seconds from a save's start until it is durable.")
    ] = None,
    restart_s: Annotated[
        float | None,
        typer.Option(help="Seconds from an interruption to training again: node, pod, restore."),
    ] = None,
    image_gb: Annotated[
        float | None,
        typer.Option(
            help="Size of the training image in GB (default: the training image's, estimated)."
        ),
    ] = None,
    image: Annotated[
        Image | None,
        typer.Option(
            help="How a new node gets the image: pull (default), stream (GKE image streaming, "
            "gcp.image_streaming) or cache (EKS, aws.gpu_ami.image_cache_snapshot)."
        ),
    ] = None,
    stack: Annotated[
        str | None,
        typer.Option(
            help="The stack the job runs on: its cloud, notice and how nodes get the image "
            "(instead of --image); with --class, its class's instance type and region."
        ),
    ] = None,
    gpu_class: Annotated[
        str | None,
        typer.Option(
            "--class",
            help="The stack's GPU class: its instance type's prices and interruption band from "
            "the provider data table (override with --spot-price/--on-demand-price and "
            "--interruptions-per-hour/--interruption-band).",
        ),
    ] = None,
    instance_type: Annotated[
        str | None,
        typer.Option(help="One of the class's types (default: the one with the most GPUs)."),
    ] = None,
    provider_data: Annotated[
        Path | None,
        typer.Option(help="The prices and bands table (default: policies/provider-data.yaml)."),
    ] = None,
    memory_rank_gb: Annotated[
        float | None,
        typer.Option(
            help="Memory tier (2+ nodes): GB one rank's snapshot holds (default: the whole "
            "--state-gb where one GPU of --class holds it, as DDP keeps it, else its shard over "
            "the job's GPUs, as FSDP keeps it)."
        ),
    ] = None,
    memory_copy_gb_per_s: Annotated[
        float,
        typer.Option(
            help="Memory tier: GB/s of a node's copy of its ranks' snapshots into host memory."
        ),
    ] = costs.HOST_COPY_GB_PER_S,
    peer_gbps: Annotated[
        float | None,
        typer.Option(
            help="Memory tier: the node's network in Gbit/s, which its copies to the peer node "
            "share (default: the table's for the --class's type)."
        ),
    ] = None,
    memory_survives: Annotated[
        float,
        typer.Option(
            help="Memory tier: the share of failures without a notice that leave each lost "
            "node's peer alive."
        ),
    ] = tiers.SURVIVES,
    program: ProgramOption = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the plan as JSON here.")
    ] = None,
    png: Annotated[
        Path | None, typer.Option(help="Chart cost and time against the interval.")
    ] = None,
) -> None:
    """Plan the checkpoint interval and the cost of a training job on spot nodes."""
    import json

    from rich.console import Console

    from spotctl.plan import report

    inputs = Inputs(
        cloud=cloud,
        step_s=step_s,
        job_hours=job_hours,
        state_gb=state_gb,
        interruptions_per_hour=interruptions_per_hour,
        interruption_band=interruption_band,
        failures_per_hour=failures_per_hour,
        nodes=nodes,
        notice_s=notice_s,
        notice_lag_s=notice_lag_s,
        spot_price=spot_price,
        on_demand_price=on_demand_price,
        from_bench=from_bench,
        checkpoint_s=checkpoint_s,
        save_s=save_s,
        restart_s=restart_s,
        image_gb=image_gb,
        image=image,
        stack=stack,
        program=program,
        gpu_class=gpu_class,
        instance_type=instance_type,
        provider_data=provider_data,
        memory_rank_gb=memory_rank_gb,
        memory_copy_gb_per_s=memory_copy_gb_per_s,
        peer_gbps=peer_gbps,
        memory_survives=memory_survives,
    )
    try:
        for path, option in ((json_path, "--json"), (png, "--png")):
            if path is not None:
                output_file(path, option)
        if png is not None and png.suffix.lower() != ".png":
            raise OutputError(f"--png {png}: name a .png file")
    except OutputError as exc:
        raise fail(exc) from None
    try:
        planned = scenario(inputs)
    except INPUT_ERRORS as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    for warning in implausible_rates(inputs):
        typer.echo(f"warning: {warning}", err=True)
    result = report.build(planned)
    console = Console()
    for part in report.tables(result):
        console.print(part)
    if json_path:
        json_path.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    if png:
        report.chart(planned, result, png)
