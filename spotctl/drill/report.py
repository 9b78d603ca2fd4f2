"""What the drill measured: the JSON report, the summary tables and the timeline chart, with
the baseline arm beside the platform's."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from spotsafe.goodput import POD_START

from spotctl.drill import accounting, projection, validation
from spotctl.drill.cluster import ON_DEMAND, SPOT
from spotctl.drill.config import DrillConfig
from spotctl.drill.harness import TICK_S, Outcome

# The goals, checked in every report.
GOAL_NOTICE_TO_DURABLE_S = 15.0  # GKE gives user pods 15 s
GOAL_NOTICE_TO_RESUME_S = 30.0
GOAL_GOODPUT_VS_BASELINE = 2.0
GOAL_POD_START_SHARE = 0.10  # of paid node time: a restart's start-up, not a third of the bill
# Interruption to training again, at the drill's scale, less the wait for a node: what the
# restart itself costs (the stop, the final save, the new pod's start and restore). The wait
# is the pool's capacity (scheduling badput; the stockout goal), the same however fast a pod
# starts: the drill's pool of a few slots runs dry under its compressed rate of notices.
GOAL_RESTART_S_MEAN = 4.0
# The measures the two arms are compared by: key, label, the chart's label, format.
COMPARED = (
    ("goodput", "goodput of paid node time", "goodput", "{:.1%}"),
    ("time_to_finish_s", "time to finish (s)", "time to finish (s)", "{:.1f}"),
    ("interruptions", "interruptions met", "interruptions met", "{:d}"),
    ("manual_interventions", "manual interventions", "manual interventions", "{:d}"),
    (
        "recovery_s_mean",
        "recovery: interruption → training (mean s)",
        "recovery, mean (s)",
        "{:.1f}",
    ),
    ("recovery_s_max", "recovery: interruption → training (max s)", "recovery, max (s)", "{:.1f}"),
    ("lost_steps", "lost steps", "lost steps", "{:d}"),
    ("cost_usd", "cost (USD)", "cost (USD)", "{:.5f}"),
)
# Job colours that the preemption marks (black, red, grey, gold) never use.
_JOB_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:cyan")


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def pool_stats(outcome: Outcome) -> dict[str, dict[str, float]]:
    """Per pool: node-seconds provisioned, the share with no pod on the node (idle) and the share
    spent in training steps (utilisation); the rest is pod start, restore and final saves."""
    stats = {}
    for pool in (SPOT, ON_DEMAND):
        nodes = [n for n in outcome.cluster.nodes if n.pool == pool]
        runs = [r for r in outcome.runs if r.node in nodes]
        up = sum(n.up_seconds(outcome.ended_at) for n in nodes)
        busy = sum(r.ended_at - r.started_at for r in runs)
        training = sum(
            (r.ended_at if r.exit_code == 0 else r.last_progress_at) - r.first_step_at
            for r in runs
            if r.first_step_at is not None
        )
        stats[pool] = {
            "node_seconds": up,
            "utilisation": _share(training, up),
            "idle_share": _share(max(0.0, up - busy), up),
        }
    return stats


def _prices(config: DrillConfig) -> dict[str, float]:
    return {SPOT: config.prices.spot, ON_DEMAND: config.prices.on_demand}


def _cost(pools: dict[str, dict[str, float]], prices: dict[str, float]) -> float:
    return sum(p["node_seconds"] / 3600 * prices[name] for name, p in pools.items())


def arm_measures(outcome: Outcome, goodput: dict, config: DrillConfig) -> dict:
    """The figures the two arms are compared by (COMPARED)."""
    recoveries = [i.resumed_at - i.at for i in outcome.interruptions if i.resumed_at is not None]
    return {
        "goodput": goodput["ratio"],
        "time_to_finish_s": outcome.ended_at - outcome.started_at,
        "interruptions": len(outcome.interruptions),
        "manual_interventions": sum(j.manual_interventions for j in outcome.jobs),
        "recovery_s_mean": _mean(recoveries),
        "recovery_s_max": _max(recoveries),
        "lost_steps": goodput["lost_steps"],
        "cost_usd": _cost(pool_stats(outcome), _prices(config)),
    }


def baseline(outcome: Outcome, goodput: dict, measures: dict, config: DrillConfig) -> dict:
    """The baseline arm: its goodput (the platform arm's keys) and what it took."""
    return {
        **goodput,
        "manual_interventions": measures["manual_interventions"],
        "time_to_finish_s": measures["time_to_finish_s"],
        "jobs_run": len(outcome.jobs),
        "finished": all(j.finished for j in outcome.jobs),
        "manual_delay_s": config.manual_delay_s,
        "interruptions": measures["interruptions"],
    }


def build(
    outcome: Outcome,
    config: DrillConfig,
    baseline_outcome: Outcome | None = None,
    memory_tier: dict | None = None,
) -> dict:
    """The report; memory_tier: the memory tier's part (spotctl.drill.memory_tier), when run."""
    pools = pool_stats(outcome)
    prices = _prices(config)
    actual = _cost(pools, prices)
    all_on_demand = sum(p["node_seconds"] for p in pools.values()) / 3600 * prices[ON_DEMAND]
    interruptions = [i.to_json() for i in outcome.interruptions]
    up_total = sum(p["node_seconds"] for p in pools.values())
    idle_total = sum(p["idle_share"] * p["node_seconds"] for p in pools.values())
    noticed = [i for i in interruptions if i["kind"] == "notice"]
    report = {
        "seed": config.seed,
        "duration_s": outcome.ended_at - outcome.started_at,
        "config": {k: v for k, v in asdict(config).items() if k != "prices"},
        "interruptions": interruptions,
        "pools": pools,
        "jobs": [
            {
                "name": j.name,
                "finished": j.finished,
                "manual_interventions": j.manual_interventions,
                "weights_sha256": j.weights_sha256,
                "reference_sha256": j.reference_sha256,
                "restarts": len(j.runs) - 1,
            }
            for j in outcome.jobs
        ],
        "cost": {
            "actual": actual,
            "all_on_demand": all_on_demand,
            "saving_share": _share(all_on_demand - actual, all_on_demand),
            "usd_per_node_hour": prices,
        },
        "events": [
            {"t": e.at - outcome.started_at, "kind": e.kind, "job": e.job, "node": e.node}
            | ({"detail": e.detail} if e.detail else {})
            | ({"waited_s": e.waited_s} if e.waited_s is not None else {})
            for e in outcome.events
        ],
        "stockout": stockout(outcome, config),
        "goodput": accounting.summary(outcome),
        "baseline": None,
        "memory_tier": memory_tier,
    }
    platform = arm_measures(outcome, report["goodput"], config)
    base = {}
    if baseline_outcome is not None:
        base_goodput = accounting.summary(baseline_outcome)
        base = arm_measures(baseline_outcome, base_goodput, config)
        report["baseline"] = baseline(baseline_outcome, base_goodput, base, config)
    report["comparison"] = {
        key: {"platform": platform[key], "baseline": base.get(key)} for key, *_ in COMPARED
    }
    base_goodput = base.get("goodput")
    pod_start_s = report["goodput"]["badput_s"][POD_START]
    report["goals"] = {
        "noticed_lost_steps": sum(i["lost_steps"] or 0 for i in noticed),
        "max_notice_to_durable_s": _max(i["notice_to_durable_s"] for i in noticed),
        "max_notice_to_resume_s": _max(i["notice_to_resume_s"] for i in noticed),
        "idle_share": _share(idle_total, up_total),
        "finished_without_intervention": _share(
            sum(j.finished and not j.manual_interventions for j in outcome.jobs), len(outcome.jobs)
        ),
        "weights_match_references": all(
            j.weights_sha256 == j.reference_sha256 for j in outcome.jobs
        ),
        "max_wait_before_fallback_s": _max(
            f["waited_s"] for f in (report["stockout"] or {}).get("fallbacks", [])
        ),
        "goodput": platform["goodput"],
        "badput_share": 1 - platform["goodput"],
        "pod_start_share": _share(pod_start_s, report["goodput"]["paid_s"]),
        "pod_start_s_per_pod": pod_start_s / len(outcome.runs) if outcome.runs else None,
        "recovery_s_mean": platform["recovery_s_mean"],
        "restart_s_mean": _mean(
            i.resumed_at - i.at - i.waited_s
            for i in outcome.interruptions
            if i.resumed_at is not None
        ),
        "goodput_vs_baseline": platform["goodput"] / base_goodput if base_goodput else None,
        "manual_interventions": platform["manual_interventions"],
        "baseline_manual_interventions": report["comparison"]["manual_interventions"]["baseline"],
        # The memory tier's part: kills it could hold yet did not, and exact resume in its arms.
        "memory_tier_kills_missed": memory_tier and memory_tier["survivable_kills_missed"],
        "memory_tier_weights_match_reference": memory_tier
        and all(memory_tier["weights_match_reference"].values()),
    }
    report["planner_check"] = planner_check(report)
    report["projection"] = projection.project(report) if report["planner_check"] else None
    return report


def planner_check(report: dict) -> dict | None:
    """The planner's prediction for the drill's measured parameters against what it measured;
    None for a drill with no noticed preemption, which gives the planner no final save."""
    try:
        return validation.compare(report)
    except validation.ReportError:
        return None


def stockout(outcome: Outcome, config: DrillConfig) -> dict | None:
    """The jobs that found spot dry: where each was then placed, after how long a wait."""
    if config.stockout_s is None:
        return None
    dry, placements = set(), []
    for event in outcome.events:
        if event.kind == "spot-dry":
            dry.add(event.job)
        elif event.kind == "placed" and event.job in dry:
            dry.discard(event.job)
            pool = next(n.pool for n in outcome.cluster.nodes if n.name == event.node)
            placements.append(
                {
                    "job": event.job,
                    "t": event.at - outcome.started_at,
                    "pool": pool,
                    "waited_s": event.waited_s,
                }
            )
    return {
        "window_s": list(config.stockout_s),
        "configured_wait_s": config.on_demand_after_s,
        "placements": placements,
        "fallbacks": [p for p in placements if p["pool"] == ON_DEMAND],
    }


def _max(values) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def _fmt(value: float | None, unit: str = "s") -> str:
    return "-" if value is None else f"{value:.1f} {unit}".strip()


def tables(report: dict):
    from rich.table import Table

    interruptions = Table(title="Interruptions")
    for column in ("job", "node", "kind", "lost steps", "notice→durable", "notice→resume"):
        interruptions.add_column(column, overflow="fold")
    for i in report["interruptions"]:
        interruptions.add_row(
            i["job"],
            i["node"],
            i["kind"] + (f" ({i['source']})" if i["source"] else ""),
            "-" if i["lost_steps"] is None else str(i["lost_steps"]),
            _fmt(i["notice_to_durable_s"]),
            _fmt(i["notice_to_resume_s"]),
        )

    jobs = Table(title="Jobs")
    for column in ("job", "finished", "restarts", "interventions", "weights = reference"):
        jobs.add_column(column, overflow="fold")
    for j in report["jobs"]:
        same = j["weights_sha256"] is not None and j["weights_sha256"] == j["reference_sha256"]
        jobs.add_row(
            j["name"],
            "yes" if j["finished"] else "NO",
            str(j["restarts"]),
            str(j["manual_interventions"]),
            "yes" if same else "NO",
        )

    goals, g = Table(title="Goals"), report["goals"]
    for column in ("measure", "value", "goal", "met"):
        goals.add_column(column, overflow="fold")
    rows = [
        ("lost steps, noticed preemptions", g["noticed_lost_steps"], 0, "=="),
        ("max notice → durable (s)", g["max_notice_to_durable_s"], GOAL_NOTICE_TO_DURABLE_S, "<="),
        ("max notice → resume (s)", g["max_notice_to_resume_s"], GOAL_NOTICE_TO_RESUME_S, "<="),
        ("jobs finished with no intervention", g["finished_without_intervention"], 1, "=="),
        (
            f"pod start, share of paid time ({_shown(g['pod_start_s_per_pod'])} s a pod)",
            g["pod_start_share"],
            GOAL_POD_START_SHARE,
            "<=",
        ),
        (
            f"restart, interruption → training less the wait for a node, mean (s) (with the "
            f"wait: {_shown(g['recovery_s_mean'])} s)",
            g["restart_s_mean"],
            GOAL_RESTART_S_MEAN,
            "<=",
        ),
        (
            f"manual interventions (baseline: {_shown(g['baseline_manual_interventions'])})",
            g["manual_interventions"],
            0,
            "==",
        ),
    ]
    if report["baseline"] is not None:
        rows.append(
            (
                "goodput against the baseline's (x)",
                g["goodput_vs_baseline"],
                GOAL_GOODPUT_VS_BASELINE,
                ">=",
            )
        )
    if report["stockout"] is not None:
        # Placement runs once per tick: the fallback may come that much after the wait.
        rows.append(
            (
                "stockout: wait before on-demand (s)",
                g["max_wait_before_fallback_s"],
                report["stockout"]["configured_wait_s"] + TICK_S,
                "<=",
            )
        )
    if report["memory_tier"] is not None:
        rows += [
            (
                "memory tier: one-node kills it held, resumed elsewhere",
                g["memory_tier_kills_missed"],
                0,
                "==",
            ),
            (
                "memory tier: both arms' weights = reference",
                int(g["memory_tier_weights_match_reference"]),
                1,
                "==",
            ),
        ]
    check = report["planner_check"]
    if check is not None:
        rows += [
            (f"{name.replace('_', ' ')}: |measured - planned|", f["gap"], check["tolerance"], "<=")
            for name, f in check["figures"].items()
        ]
    for name, value, goal, op in rows:
        met = value is not None and _OPS[op](value, goal)
        goals.add_row(name, _shown(value), f"{op} {goal:g}", "yes" if met else "NO")

    cost, c = Table(title="Pools and cost"), report["cost"]
    for column in ("pool", "node-s", "utilisation", "no pod on node", "USD/node-h"):
        cost.add_column(column, overflow="fold")
    for name, p in report["pools"].items():
        cost.add_row(
            name,
            f"{p['node_seconds']:.0f}",
            f"{p['utilisation']:.1%}",
            f"{p['idle_share']:.1%}",
            f"{c['usd_per_node_hour'][name]:.4f}",
        )
    cost.caption = (
        f"cost {c['actual']:.5f} USD vs {c['all_on_demand']:.5f} all on-demand: "
        f"{c['saving_share']:.0%} saved"
    )
    tables = [interruptions, jobs, goals, cost, badput_table("Goodput", report["goodput"])]
    if check is not None:
        tables += [planner_table(check), projection_table(report["projection"])]
    if report["baseline"] is not None:
        tables += [badput_table("Goodput, baseline arm", report["baseline"]), comparison(report)]
    if report["memory_tier"] is not None:
        tables.append(memory_tier_table(report["memory_tier"]))
    return tables


def memory_tier_table(part: dict):
    """Lost steps per hard kill of the two-node job: the durable tier alone, then with the
    memory tier; measured kill by kill, and as the planner predicts them."""
    from rich.table import Table

    table = Table(title="Hard kills of a two-node job: durable tier alone → with the memory tier")
    for column in ("kill", "lost steps, durable only", "lost steps, memory tier"):
        table.add_column(column, overflow="fold")
    for i, kill in enumerate(part["kills"], 1):
        lost = "both nodes" if len(kill["nodes"]) > 1 else f"node {kill['nodes'][0]}"
        cells = (
            f"{kill[arm]['lost_steps']} (from {kill[arm]['resumed_from']}, {kill[arm]['source']})"
            for arm in ("durable_only", "memory_tier")
        )
        table.add_row(f"{i}: {lost}", *cells)
    measured, planned = part["lost_steps"], part["planned_lost_steps"]
    for key, label in (("mean", "every kill"), ("one_node", "one node"), ("both_nodes", "both")):
        for kind, figures in (("measured", measured), ("planned", planned)):
            table.add_row(
                f"mean, {label}: {kind}",
                *(f"{figures[arm][key]:.1f}" for arm in ("durable_only", "memory_tier")),
            )
    job, saves = part["job"], part["saves"]
    same = " and ".join(
        arm.replace("_", " ") for arm, ok in part["weights_match_reference"].items() if ok
    )
    table.caption = (
        f"two ranks standing for two nodes, a step of {job['step_s'] * 1000:.1f} ms; durable "
        f"save every {job['durable_every_steps']} steps (blocks "
        f"{saves['durable_save_blocked_s'] * 1000:.1f} ms, durable after "
        f"{saves['durable_save_s'] * 1000:.0f} ms), memory save every "
        f"{job['memory_every_steps']} (blocks {saves['memory_save_blocked_s'] * 1000:.1f} ms, on "
        f"the peer after {saves['memory_save_to_peer_s'] * 1000:.0f} ms). Planned: the "
        "planner's loss at a uniform moment of each tier's period, in steps. Weights = the "
        f"uninterrupted run's: {same or 'NEITHER arm'}"
    )
    return table


def planner_table(check: dict):
    """The drill's jobs as measured and as the planner predicts them from the drill's figures."""
    from rich.table import Table

    table = Table(title="The planner against the drill (shares of the jobs' time)")
    for column in ("figure", "measured", "planned", "gap"):
        table.add_column(column, overflow="fold")
    for name, f in check["figures"].items():
        shares = (f"{f[key]:.1%}" for key in ("measured", "predicted", "gap"))
        table.add_row(name.replace("_", " "), *shares)
    i = check["inputs"]
    table.caption = (
        f"planned from the drill's step {i['step_s'] * 1000:.2f} ms, "
        f"interval {i['interval_s']:.2f} s, "
        f"snapshot {i['blocked_s'] * 1000:.1f} ms, final save {i['save_s']:.2f} s of a "
        f"{i['notice_s']:g} s notice, restart {i['restart_s']:.2f} s, "
        f"{i['notices_per_job_hour']:.0f} notices and {i['failures_per_job_hour']:.0f} kills per "
        "training hour"
    )
    return table


def projection_table(projected: dict):
    """The seed's table at the Advisor's bands, platform against baseline."""
    from rich.table import Table

    table = Table(title="Projected on AWS by the checked planner: platform / baseline")
    goal = projected["badput_goal"]
    for column in (
        "Advisor band",
        f"badput (goal <= {goal:.0%})",
        "hours to a model",
        "interventions",
        "recovery",
    ):
        table.add_column(column, overflow="fold")
    for band, arms in projected["bands"].items():
        p, b = arms["platform"], arms["baseline"]
        met = "met" if p["badput"] <= goal else "MISSED"
        table.add_row(
            band,
            f"{p['badput']:.1%} ({met}) / {b['badput']:.1%}",
            f"{p['hours_to_model']:.1f} / {b['hours_to_model']:.1f}",
            f"{p['interventions']:.0f} / {b['interventions']:.2g}",
            f"{p['recovery_s'] / 60:.0f} / {b['recovery_s'] / 60:.0f} min",
        )
    table.caption = (
        f"a {projected['job_hours']:g} h job at the drill's measures x60; the baseline saves at "
        "the drill's cadence, loses the work since its last save at every interruption and "
        "waits 40 min for a restart by hand"
    )
    return table


def badput_table(title: str, goodput: dict):
    """Goodput and badput by cause: in total, per pool (node time) and per job (its time)."""
    from rich.table import Table

    table = Table(title=title)
    for column in ("of", "time (s)", "goodput", *accounting.ACCOUNTS):
        table.add_column(column.replace("_", " "), overflow="fold")
    parts = [("all nodes", goodput, "paid_s")]
    parts += [(pool, p, "paid_s") for pool, p in goodput["pools"].items() if p["paid_s"] > 0]
    parts += [(job, j, "run_s") for job, j in goodput["jobs"].items()]
    for name, part, time_key in parts:
        total = part[time_key]
        shares = [
            f"{part['badput_s'][c] / total:.1%}" if total else "-" for c in accounting.ACCOUNTS
        ]
        table.add_row(name, f"{total:.0f}", f"{part['ratio']:.1%}", *shares)
    table.caption = (
        "nodes: node time paid; jobs: time from first queued to finished. Shares of that time."
    )
    return table


def comparison(report: dict):
    from rich.table import Table

    b = report["baseline"]
    table = Table(title="Platform against baseline (same interruption schedule)")
    for column in ("measure", "platform", "baseline"):
        table.add_column(column, overflow="fold")
    for key, label, _, form in COMPARED:
        cells = [_format(form, report["comparison"][key][arm]) for arm in ("platform", "baseline")]
        if key == "time_to_finish_s" and not b["finished"]:
            cells[1] = f"> {cells[1]} (not finished)"
        table.add_row(label, *cells)
    table.caption = (
        f"baseline: {b['jobs_run']} jobs, plain trainer, static spot group, restarted by hand "
        f"after {b['manual_delay_s']:.0f} s (the seed's 40 min at the drill's 60x time scale); "
        + ("all jobs finished" if b["finished"] else "NOT all jobs finished in time")
    )
    return table


_OPS = {"==": lambda v, g: v == g, "<=": lambda v, g: v <= g, ">=": lambda v, g: v >= g}


def _shown(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _format(form: str, value) -> str:
    return "-" if value is None else form.format(value)


def timeline(
    arms: list[tuple[str, Outcome]],
    path: Path,
    stockout_s: tuple[float, float] | None = None,
    compared: dict | None = None,
) -> None:
    """Each arm's jobs on nodes over time, with the preemption marks and the stockout's window,
    on one time axis; below them, the measures the arms are compared by, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heights = [1.2 + 0.6 * len(outcome.cluster.nodes) for _, outcome in arms]
    if compared is not None:
        heights.append(2.6)
    fig = plt.figure(figsize=(13, sum(heights)))
    grid = fig.add_gridspec(len(heights), len(COMPARED), height_ratios=heights)
    shared = None
    for i, (title, outcome) in enumerate(arms):
        ax = fig.add_subplot(grid[i, :], sharex=shared)
        shared = shared or ax
        _draw_arm(ax, outcome, title, stockout_s if i == 0 else None)
    if compared is not None:
        for k, (key, _, label, form) in enumerate(COMPARED):
            ax = fig.add_subplot(grid[-1, k])
            values = [compared[key][arm] for arm in ("platform", "baseline")]
            ax.bar([0, 1], [v or 0 for v in values], color=["tab:green", "tab:gray"])
            for x, value in enumerate(values):
                ax.text(x, value or 0, _format(form, value), ha="center", va="bottom", fontsize=7)
            ax.set_xticks([0, 1], ["platform", "baseline"], fontsize=7)
            ax.set_yticks([])
            ax.set_title(label, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _draw_arm(ax, outcome: Outcome, title: str, stockout_s: tuple[float, float] | None) -> None:
    from matplotlib.patches import Patch

    nodes = [n.name for n in outcome.cluster.nodes]
    row = {name: i for i, name in enumerate(nodes)}
    job_colour = {j.name: _JOB_COLOURS[i % len(_JOB_COLOURS)] for i, j in enumerate(outcome.jobs)}
    t0 = outcome.started_at
    for run in outcome.runs:
        y, colour = row[run.node.name], job_colour[run.spec.name]
        trained_from = run.first_step_at or run.ended_at
        # The pod's start and restore in a pale shade, its training in full colour.
        ax.barh(y, trained_from - run.started_at, left=run.started_at - t0, color=colour, alpha=0.3)
        ax.barh(y, run.ended_at - trained_from, left=trained_from - t0, color=colour)
    for node in outcome.cluster.nodes:
        for start, end in node.uptime:  # paid node time, with or without a pod
            ax.plot([start - t0, end - t0], [row[node.name] + 0.45] * 2, color="black", lw=1)
    if stockout_s is not None:
        low, high = stockout_s
        ax.axvspan(low, min(high, outcome.ended_at - t0), color="red", alpha=0.08)
        ax.text(low, -0.6, " spot cannot be provisioned", color="darkred", fontsize="small")
    marks = {
        "notice": ("v", "black", "notice"),
        "hard-kill": ("X", "red", "hard kill"),
        "reclaimed": ("x", "dimgray", "reclaimed with the pod"),
        "drain": ("^", "gold", "drained to on-demand"),
    }
    for kind, (marker, colour, label) in marks.items():
        points = [(e.at - t0, row[e.node]) for e in outcome.events if e.kind == kind]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.scatter(xs, ys, marker=marker, color=colour, s=90, zorder=3, label=label)
    handles, _ = ax.get_legend_handles_labels()
    handles += [Patch(color=colour, label=name) for name, colour in job_colour.items()]
    ax.set_yticks(range(len(nodes)), nodes)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the arm started")
    ax.set_title(f"{title}: jobs on nodes (pale: pod start and restore; line: node paid)")
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
