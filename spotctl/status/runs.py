"""A run's status from the cluster's Prometheus: its attempts, the step each resumed from and the
steps it lost, goodput and badput by cause, GPU-hours and cost by capacity type, and whether it
trains now.

Each training process exports its ledger (spotsafe.metrics) and the PodMonitor adds the pod's
namespace, pod and run (the Job) to every series. A process starts its counters at 0 and a
training pod never restarts its container (restartPolicy Never, which podFailurePolicy
requires), so a process's last value within the lookback is its whole ledger. The cluster adds
per pod what happens before a process starts (the recording
`namespace_pod_cause:spot_training_pod_badput_seconds`: scheduling and the pod's start), where
it ran (`namespace_pod:spot_training_pod_node_labels:last1h`: GPU class and capacity type) and
the stack's GPU-hour prices (components/k8s/prices.py), the same recordings the cost rules and
`spotctl review` read (components/k8s/rules/spot-training.rules.yaml).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from spotsafe.goodput import CAUSES, IDLE_NODES, LOST_WORK

from spotctl.drill.ledger import Prometheus, sample_value

RUN_CAUSES = tuple(cause for cause in CAUSES if cause != IDLE_NODES)
"""A run's badput causes: an idle node belongs to no run."""
STEP = "spotsafe_training_step"
POD_BADPUT = "namespace_pod_cause:spot_training_pod_badput_seconds"
PLACEMENT = "namespace_pod:spot_training_pod_node_labels:last1h"
PRICE_RECORD = "gpu_class_capacity_type:spot_training_gpu_hour_usd:price"
"""The stack's GPU-hour prices as components/k8s/prices.py records them (named here, as
importing that module would load Pulumi)."""
UNKNOWN = "unknown"
"""The capacity type of a pod whose node Prometheus does not know."""


def matchers(namespace: str | None, run: str | None, *extra: str) -> str:
    """PromQL label matchers for the team and the run (values quoted as PromQL strings)."""
    pairs = (("namespace", namespace), ("run", run))
    return ", ".join([*(f"{k}={json.dumps(v)}" for k, v in pairs if v), *extra])


def queries(namespace: str | None, run: str | None, since: str, fresh_s: float) -> dict[str, str]:
    """The instant queries status sends, by the field they fill."""
    sel = matchers(namespace, run)
    team = matchers(namespace, None)

    def last(metric: str, *extra: str) -> str:
        return f"last_over_time({metric}{{{matchers(namespace, run, *extra)}}}[{since}])"

    fresh = f"{fresh_s:g}s"
    return {
        "goodput_s": last("spotsafe_goodput_seconds_total"),
        "badput_s": last("spotsafe_badput_seconds_total"),
        "attempt": last("spotsafe_attempt"),
        "resumed_from": last("spotsafe_resumed_from_step"),
        "redo_until": last("spotsafe_redo_until_step"),
        "notices": last("spotsafe_termination_notices_total", 'kind="preemption"'),
        "reached": f"max_over_time({STEP}{{{sel}}}[{since}])",
        "pod_badput_s": f"max_over_time({POD_BADPUT}{{{sel}}}[{since}])",
        "placement": f"max_over_time({PLACEMENT}{{{team}}}[{since}])",
        "prices": PRICE_RECORD,
        # A process trains now when it is still scraped and its step moved within `fresh`.
        "stepping": f"(max_over_time({STEP}{{{sel}}}[{fresh}]) - "
        f"min_over_time({STEP}{{{sel}}}[{fresh}])) "
        f"and (timestamp({STEP}{{{sel}}}) > time() - {fresh_s:g})",
        # Every run, to name them when none matches.
        "runs": "count by (namespace, run) "
        f"(last_over_time(spotsafe_goodput_seconds_total[{since}]))",
    }


def _process(metric: dict[str, str]) -> tuple[str, str, str, str]:
    return (
        metric.get("namespace", ""),
        metric.get("run", ""),
        metric.get("pod", ""),
        metric.get("instance", ""),
    )


class Unknown(Exception):
    """No run matches; the message lists those that exist, in one line."""


def read(
    prometheus: Prometheus,
    namespace: str | None,
    run: str | None,
    since: str,
    fresh_s: float,
    at: float,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The status of each matching run, by namespace and name; with the queries as sent."""
    sent = queries(namespace, run, since, fresh_s)
    answers = {name: prometheus.query(promql, at) for name, promql in sent.items()}
    if not answers["goodput_s"]:
        raise Unknown(_unknown(namespace, run, since, answers["runs"], prometheus.url))
    processes: dict[tuple, dict[str, Any]] = defaultdict(
        lambda: {"badput_s": dict.fromkeys(RUN_CAUSES, 0.0), "notices": {}}
    )
    for sample in answers["goodput_s"]:
        processes[_process(sample["metric"])]["goodput_s"] = sample_value(sample)
    for sample in answers["badput_s"]:
        cause = sample["metric"].get("cause")
        if cause in RUN_CAUSES:
            processes[_process(sample["metric"])]["badput_s"][cause] += sample_value(sample)
    for name in ("attempt", "resumed_from", "redo_until", "reached"):
        for sample in answers[name]:
            key = _process(sample["metric"])
            if key in processes:
                processes[key][name] = round(sample_value(sample))
    for sample in answers["notices"]:
        key = _process(sample["metric"])
        if key in processes and sample_value(sample) > 0:
            source = sample["metric"].get("source", UNKNOWN)
            processes[key]["notices"][source] = round(sample_value(sample))
    stepping = {_process(s["metric"]) for s in answers["stepping"] if sample_value(s) > 0}
    placement = {
        (s["metric"].get("namespace", ""), s["metric"].get("pod", "")): (
            s["metric"].get("label_gpu_class", UNKNOWN),
            s["metric"].get("label_capacity_type", UNKNOWN),
        )
        for s in answers["placement"]
    }
    prices = {
        (s["metric"].get("label_gpu_class"), s["metric"].get("label_capacity_type")): sample_value(
            s
        )
        for s in answers["prices"]
    }
    pod_badput: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for sample in answers["pod_badput_s"]:
        cause = sample["metric"].get("cause")
        if cause in RUN_CAUSES:
            pod = (sample["metric"].get("namespace", ""), sample["metric"].get("pod", ""))
            pod_badput[pod][cause] = sample_value(sample)
    by_run: dict[tuple[str, str], list] = defaultdict(list)
    for key, process in processes.items():
        process.update(
            pod=key[2],
            placement=placement.get((key[0], key[2]), (UNKNOWN, UNKNOWN)),
            stepping=key in stepping,
        )
        by_run[key[:2]].append(process)
    runs = [_run(ns, name, by_run[(ns, name)], pod_badput, prices) for ns, name in sorted(by_run)]
    return runs, sent


def _unknown(namespace: str | None, run: str | None, since: str, found: list, url: str) -> str:
    asked = "/".join(v for v in (namespace, run) if v)
    runs = sorted(f"{s['metric'].get('namespace')}/{s['metric'].get('run')}" for s in found)
    where = f"in Prometheus at {url} over the last {since}"
    if not runs:
        return f"no training run {where}"
    return f"no run {asked} {where}; runs there: {', '.join(runs)}"


def _attempts(processes: list[dict]) -> dict[Any, list[dict]]:
    """Processes by attempt: the runtime's attempt id, or the pod where it exports none."""
    attempts: dict[Any, list[dict]] = defaultdict(list)
    for process in processes:
        attempts[process.get("attempt", process["pod"])].append(process)
    return dict(sorted(attempts.items(), key=lambda item: (isinstance(item[0], str), item[0])))


def _run(
    namespace: str,
    name: str,
    processes: list[dict],
    pod_badput: dict[tuple[str, str], dict[str, float]],
    prices: dict[tuple[str, str], float],
) -> dict[str, Any]:
    goodput_s = 0.0
    badput_s = dict.fromkeys(RUN_CAUSES, 0.0)
    capacity: dict[str, dict[str, Any]] = {}
    priced: dict[tuple[str, str], float | None] = {}
    attempts = []
    for attempt_id, members in _attempts(processes).items():
        pods = sorted({p["pod"] for p in members})
        a_good = sum(p.get("goodput_s", 0.0) for p in members)
        a_bad = {c: sum(p["badput_s"][c] for p in members) for c in RUN_CAUSES}
        for pod in pods:
            for cause, seconds in pod_badput.get((namespace, pod), {}).items():
                a_bad[cause] += seconds
        for p in members:
            # Each process drives one GPU (a torchrun rank): its ledger's seconds are
            # GPU-seconds, as the cost recordings count them.
            gpu_hours = (p.get("goodput_s", 0.0) + sum(p["badput_s"].values())) / 3600
            gpu_class, kind = p["placement"]
            entry = capacity.setdefault(kind, {"gpu_hours": 0.0, "cost_usd": 0.0})
            entry["gpu_hours"] += gpu_hours
            price = prices.get((gpu_class, kind))
            priced[(gpu_class, kind)] = price
            entry["cost_usd"] = (
                None
                if price is None or entry["cost_usd"] is None
                else (entry["cost_usd"] + gpu_hours * price)
            )
        resumed = min((p["resumed_from"] for p in members if "resumed_from" in p), default=None)
        resumed = None if resumed is None or resumed < 0 else resumed
        redo = max((p["redo_until"] for p in members if "redo_until" in p), default=None)
        notices: dict[str, int] = {}
        for p in members:  # every rank of the attempt hears the same notice
            for source, count in p["notices"].items():
                notices[source] = max(notices.get(source, 0), count)
        attempts.append(
            {
                "attempt": attempt_id if isinstance(attempt_id, int) else None,
                "pods": pods,
                "capacity_types": sorted({p["placement"][1] for p in members}),
                "resumed_from": resumed,
                "redo_until": redo,
                "lost_steps": None if redo is None else max(0, redo - (resumed or 0)),
                "reached_step": max(
                    (p["reached"] for p in members if "reached" in p), default=None
                ),
                "notices": notices,
                "training_now": any(p["stepping"] for p in members),
                "goodput_s": a_good,
                "badput_s": a_bad,
            }
        )
        goodput_s += a_good
        for cause in RUN_CAUSES:
            badput_s[cause] += a_bad[cause]
    run_s = goodput_s + sum(badput_s.values())
    costs = [entry["cost_usd"] for entry in capacity.values()]
    return {
        "namespace": namespace,
        "run": name,
        "training_now": any(a["training_now"] for a in attempts),
        "step": max((a["reached_step"] or 0 for a in attempts), default=0),
        "recoveries": len(attempts) - 1,
        "resumed_from": [a["resumed_from"] for a in attempts[1:]],
        "lost_steps": sum(a["lost_steps"] or 0 for a in attempts),
        "goodput": {
            "ratio": goodput_s / run_s if run_s > 0 else 0.0,
            "goodput_s": goodput_s,
            "run_s": run_s,
            "badput_s": badput_s,
            "lost_work_share": badput_s[LOST_WORK] / run_s if run_s > 0 else 0.0,
        },
        "capacity": dict(sorted(capacity.items())),
        "gpu_hours": sum(entry["gpu_hours"] for entry in capacity.values()),
        "cost_usd": None if None in costs else sum(costs),
        "prices": [
            {"gpu_class": c, "capacity_type": k, "usd_per_gpu_hour": price}
            for (c, k), price in sorted(priced.items())
        ],
        "attempts": attempts,
    }
