"""The plan: its JSON, the tables the command prints, and the chart of cost and time against the
checkpoint interval."""

from __future__ import annotations

import math
from pathlib import Path

from spotctl.plan import tiers
from spotctl.plan.model import (
    HOUR_S,
    Scenario,
    breakeven_notice_rate,
    cost_ratio,
    expected,
    interval_s,
    on_demand,
    planned_goodput,
    young_daly_s,
)

BADPUT_GOAL = 0.06
"""The seed's goal: badput of every cause (restarts, lost work, saves, idle nodes) at most 6 % of
the paid time. The seed's "idle 34 % -> 6 %" counts all of it, not only nodes with no pod; a drill
compressed into minutes cannot reach it, so the drill holds its projection to it (projection.py)."""
# The inputs that set each cause of badput, named for a plan that misses the goal.
CAUSE_INPUTS = {
    "blocking_saves": "the snapshot each save blocks for (--checkpoint-s, --state-gb)",
    "lost_work": "failures without a notice (--failures-per-hour) and final saves that do not "
    "fit the notice (--save-s, --notice-s, --notice-lag-s)",
    "final_saves": "the final save every notice waits for (--save-s, --state-gb)",
    "restarts": "the restart after each interruption (--restart-s, --state-gb) at the "
    "interruption rates (--interruptions-per-hour, --failures-per-hour)",
}
MAX_SHARDS = 1024


def build(s: Scenario) -> dict:
    job = s.job
    chosen = interval_s(job)
    spot = expected(job, chosen)
    on_demand_goodput = planned_goodput(on_demand(job))
    badput = 1 - spot.goodput
    largest = max(spot.badput, key=spot.badput.get)
    steps = max(1, round(chosen / job.step_s))
    expected_hours = job.work_s / spot.goodput / HOUR_S
    on_demand_hours = job.work_s / on_demand_goodput / HOUR_S
    return {
        "interval_s": chosen,
        "interval_steps": steps,
        "young_daly_interval_s": _finite(young_daly_s(job.blocked_s, job.loss_rate)),
        "min_interval_s": job.upload_s,
        "expected_goodput": spot.goodput,
        "expected_badput": badput,
        "badput_by_cause": spot.badput,
        "expected_hours": expected_hours,
        "on_demand_hours": on_demand_hours,
        "expected_time_ratio": on_demand_goodput / spot.goodput,
        "expected_cost_ratio": cost_ratio(job, s.price_ratio),
        **dollars(s, (spot.goodput, expected_hours), (on_demand_goodput, on_demand_hours)),
        "breakeven_interruptions_per_hour": _finite(
            breakeven_notice_rate(job, s.price_ratio) * HOUR_S / s.nodes
        ),
        "final_save_fits": job.final_save_fits,
        "final_save_s": job.save_s,
        "notice_s": s.assumptions["notice_s"],
        "final_save_window_s": job.notice_s,
        "final_save_advice": [] if job.final_save_fits else advice(s, chosen, steps),
        "badput_goal": BADPUT_GOAL,
        "badput_goal_met": badput <= BADPUT_GOAL,
        "limited_by": None
        if badput <= BADPUT_GOAL
        else f"{largest.replace('_', ' ')} ({spot.badput[largest]:.1%} of paid time): "
        + CAUSE_INPUTS[largest],
        "memory_tier": tiers.off(s.memory)
        if isinstance(s.memory, str)
        else tiers.plan(job, s.memory),
        "assumptions": s.assumptions,
    }


def dollars(s: Scenario, spot: tuple[float, float], on_demand: tuple[float, float]) -> dict:
    """The job's cost in USD on spot and on on-demand, each (goodput, hours to finish): all its
    nodes' paid hours at the price, and what an hour of training kept costs per GPU (per node
    where the GPUs per node are not known)."""
    a = s.assumptions
    gpus = a["gpus_per_node"]
    (spot_goodput, spot_hours), (on_demand_goodput, on_demand_hours) = spot, on_demand
    return {
        "spot_cost_usd": spot_hours * s.nodes * a["spot_price"],
        "on_demand_cost_usd": on_demand_hours * s.nodes * a["on_demand_price"],
        "trained_hour_unit": "GPU-hour" if gpus else "node-hour",
        "spot_usd_per_trained_hour": a["spot_price"] / (gpus or 1) / spot_goodput,
        "on_demand_usd_per_trained_hour": a["on_demand_price"] / (gpus or 1) / on_demand_goodput,
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def advice(s: Scenario, chosen_s: float, steps: int) -> list[str]:
    """What makes a final save fit the notice, or bounds the loss when it does not."""
    job = s.job
    lines = []
    if s.sized is not None:
        shards = next(
            (
                n
                for n in range(s.nodes + 1, MAX_SHARDS + 1)
                if job.step_s + _save_s(s, s.state_gb / n) <= job.notice_s
            ),
            None,
        )
        if shards is not None:
            lines.append(
                f"shard: a sharded save over {shards} nodes writes {s.state_gb / shards:.3g} GB "
                f"each in {_save_s(s, s.state_gb / shards):.0f} s, within the notice"
            )
    room = job.notice_s - job.step_s - job.blocked_s
    shard_gb = s.state_gb / s.nodes
    lines.append(
        f"stage locally: the final save fits at {shard_gb / room:.3g} GB/s per node or faster, to "
        "a volume that outlives the node (node-local /scratch goes with it)"
        if room > 0
        else "stage locally cannot help: the last step and the snapshot alone outlast the notice"
    )
    lines.append(
        f"shorten the interval: each notice now loses the work since the last durable "
        f"checkpoint; save every {chosen_s:.0f} s ({steps} steps)"
    )
    return lines


def _save_s(s: Scenario, shard_gb: float) -> float:
    """A save of a shard of `shard_gb`: the source's upload, and the plan's snapshot scaled."""
    at = s.sized(shard_gb)
    return at.save_s - at.blocked_s + s.job.blocked_s * shard_gb * s.nodes / s.state_gb


def tables(result: dict) -> list:
    """The plan as a table, then how it was reached and, when the final save does not fit,
    what to do."""
    from rich.table import Table

    a = result["assumptions"]
    where = (
        f"{a['nodes']} x {a['instance_type']} (stack {a['stack']}, class {a['gpu_class']}, "
        f"{a['region']})"
        if "gpu_class" in a
        else f"{a['nodes']} node(s), {a['cloud']}"
    )
    plan = Table(
        title=f"Plan: {a['state_gb']:g} GB on {where}, "
        f"{a['interruptions_per_node_hour']:.3g} interruptions per node-hour",
        show_header=False,
    )
    plan.add_column("measure", overflow="fold")
    plan.add_column("value", overflow="fold")
    goal_met = "met" if result["badput_goal_met"] else "MISSED"
    rows = [
        (
            "checkpoint interval",
            f"{result['interval_s']:.0f} s (--every-steps {result['interval_steps']})",
        ),
        ("expected goodput", f"{result['expected_goodput']:.1%}"),
        (
            "time to finish",
            f"{result['expected_hours']:.1f} h, x{result['expected_time_ratio']:.3f} on-demand",
        ),
        ("cost", f"x{result['expected_cost_ratio']:.3f} on-demand"),
        (
            "job cost",
            f"${result['spot_cost_usd']:,.0f} spot, ${result['on_demand_cost_usd']:,.0f} on-demand",
        ),
        (
            f"per {result['trained_hour_unit']} trained",
            f"${result['spot_usd_per_trained_hour']:,.2f} spot, "
            f"${result['on_demand_usd_per_trained_hour']:,.2f} on-demand",
        ),
        (
            "on-demand cheaper above",
            "never: spot is free"
            if result["breakeven_interruptions_per_hour"] is None
            else f"{result['breakeven_interruptions_per_hour']:.3g} interruptions per node-hour",
        ),
        (
            "final save",
            f"{a['step_s'] + result['final_save_s']:.3g} s of a "
            f"{result['final_save_window_s']:g} s window: "
            + ("fits" if result["final_save_fits"] else "DOES NOT FIT"),
        ),
        (f"badput <= {result['badput_goal']:.0%}", f"{result['expected_badput']:.1%}: {goal_met}"),
    ]
    for row in rows:
        plan.add_row(*row)
    yd = result["young_daly_interval_s"]
    badput = ", ".join(
        f"{cause.replace('_', ' ')} {share:.2%}"
        for cause, share in sorted(result["badput_by_cause"].items(), key=lambda kv: -kv[1])
    )
    notes = [
        f"Interval: Young/Daly {'(no loss expected)' if yd is None else f'{yd:.0f} s'} on a "
        f"{a['blocked_s']:.3g} s blocking save, never under the {result['min_interval_s']:.3g} s "
        "upload, never over the job.",
        f"Badput: {badput}.",
        f"Notice window: the {a['notice_s']:g} s notice less the {a['notice_lag_s']:g} s the "
        "drain's SIGTERM may lag it, as the runtime plans its final save.",
        f"Prices: ${a['spot_price']:g} spot, ${a['on_demand_price']:g} on-demand per node-hour"
        + (
            f" (${a['spot_price'] / a['gpus_per_node']:.4g} and "
            f"${a['on_demand_price'] / a['gpus_per_node']:.4g} per GPU-hour, "
            f"{a['gpus_per_node']} GPUs)"
            if a["gpus_per_node"]
            else ""
        )
        + f": {a['price_source']}.",
        f"Interruptions: {a['interruptions_per_node_hour']:.3g} per node-hour: "
        f"{a['interruption_rate_source']}.",
    ]
    if a.get("capacity_gpus", {}).get("on_demand") == 0:
        notes.append(
            f"Class {a['gpu_class']} has no on-demand capacity in stack {a['stack']}: the "
            "on-demand figures say what it would cost."
        )
    if "node_start_s" in a:
        image = (
            f"{a['image_gb']:g} GB image pulled"
            if a["image"] == "pull"
            else f"image {'streamed' if a['image'] == 'stream' else 'cached on the node'}"
        )
        notes.append(
            f"Restart: {a['node_provision_s']:g} s new node + {a['image_s']:.0f} s {image} + "
            f"{a['process_start_s']:g} s process start + {a['restore_s']:.3g} s restore = "
            f"{a['restart_s']:.0f} s."
        )
    if result["limited_by"]:
        notes.append(f"The badput goal is missed; the largest cause is {result['limited_by']}.")
    if result["final_save_advice"]:
        notes.append("The final save does not fit the notice:")
        notes += [f"  - {line}" for line in result["final_save_advice"]]
    return [plan, *notes, *_two_tiers(result["memory_tier"], a)]


def _two_tiers(memory: dict, a: dict) -> list:
    """The memory tier beside the durable one, or the line that says why it does not apply."""
    from rich.table import Table

    if not memory["applies"]:
        return [f"Memory tier: {memory['why']}."]
    table = Table(title="Two tiers, against failures without a notice")
    for column in ("", "memory tier", "durable tier"):
        table.add_column(column, overflow="fold")
    rows = [
        (
            "interval",
            f"{memory['memory_interval_s']:.0f} s ({memory['memory_interval_steps']} steps)",
            f"{memory['durable_interval_s']:.0f} s ({memory['durable_interval_steps']} steps)",
        ),
        ("interval alone", "", f"{memory['durable_only_interval_s']:.0f} s"),
        (
            "per save",
            f"blocks {memory['memory_blocked_s']:.3g} s, held {memory['memory_save_s']:.3g} s",
            f"blocks {memory['durable_blocked_s']:.3g} s, durable {memory['durable_save_s']:.3g} s",
        ),
        ("survives", memory["memory_survives"], memory["durable_survives"]),
        (
            "lost per failure",
            f"{memory['lost_per_failure_s']:.0f} s with both",
            f"{memory['durable_only_lost_per_failure_s']:.0f} s alone",
        ),
        (
            "badput",
            f"{memory['badput']:.3%} with both",
            f"{memory['durable_only_badput']:.3%} alone",
        ),
    ]
    for row in rows:
        table.add_row(*row)
    flow = f", at most {a['flow_gbps']:g} Gbps a rank (one TCP flow each)" if a["flow_gbps"] else ""
    return [
        table,
        f"Memory tier: a rank's {a['memory_rank_gb']:.3g} GB ({a['memory_rank_gb_source']}) "
        f"copied at {a['memory_copy_gb_per_s']:g} GB/s, then into the tmpfs and to the peer: "
        f"{a['memory_ranks_per_node']} rank(s) a node over {a['peer_gbps']:g} Gbps "
        f"({a['peer_gbps_source']}){flow}. Survives: {a['memory_survives']:.0%} of failures "
        f"without a notice ({a['memory_survives_source']}). Holds up to "
        f"{memory['host_memory_gb_per_node']:.3g} GB of a node's host memory; "
        + ("pays" if memory["pays"] else "does not pay: its blocking outweighs what it keeps")
        + ".",
    ]


def chart(s: Scenario, result: dict, path: Path) -> None:
    """Cost and time against on-demand over checkpoint intervals around the plan's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    job, chosen = s.job, result["interval_s"]
    low = max(job.step_s, chosen / 30)
    high = max(min(job.work_s, chosen * 30), low * 10)
    intervals = np.geomspace(low, high, 200)
    on_demand_goodput = planned_goodput(on_demand(job))
    time_ratio = [on_demand_goodput / expected(job, t).goodput for t in intervals]
    cost = [s.price_ratio * r for r in time_ratio]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(intervals, time_ratio, label="time to finish / on-demand")
    ax.plot(intervals, cost, label="cost / on-demand")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.set_ylim(0, max(1.5, 3 * result["expected_time_ratio"]))
    ax.axvline(chosen, color="black", linestyle="--", label=f"planned interval {chosen:.0f} s")
    if job.upload_s > low:
        ax.axvspan(
            low,
            job.upload_s,
            color="grey",
            alpha=0.15,
            label="shorter than an upload: saves overlap",
        )
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint interval (s of training)")
    ax.set_ylabel("ratio against on-demand")
    ax.set_title(
        f"{s.state_gb:g} GB, {result['assumptions']['interruptions_per_node_hour']:.3g} "
        f"interruptions per node-hour, {result['final_save_window_s']:g} s notice window"
    )
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
