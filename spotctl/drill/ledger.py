"""The cloud drill's report from the cluster's own goodput ledger in Prometheus.

Each training process exports its ledger (spotsafe.metrics: `spotsafe_goodput_seconds_total`,
`spotsafe_badput_seconds_total` by cause) and the cluster adds what happens before a process
starts (the recording `namespace_pod_cause:spot_training_pod_badput_seconds`: scheduling and the
pod's start). Over the drill's window these sum per run as the recording rules sum them over 6 h
(components/k8s/rules/spot-training.rules.yaml). Queries go to Prometheus's HTTP API
(`/api/v1/query` at the window's end, `/api/v1/query_range` over it).

The report has the local drill's keys (spotctl.drill.report.build); what a cloud run cannot
measure is None and `not_measured` says why.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

from spotsafe.goodput import CAUSES, LOST_WORK

from spotctl.drill.accounting import ACCOUNTS, Account

TRAINING_STEP_S = 15.0
"""Resolution of the training timeline (query_range's step)."""
TRAINING = "max by (namespace, run) (rate(spotsafe_goodput_seconds_total[1m]))"
"""Per run, the share of the last minute a process spent on new steps: near 1 while training."""
TRAINING_THRESHOLD = 0.5
NOT_MEASURED = {
    "weights_match_references": "a cloud run has no uninterrupted reference run to compare with",
    "baseline": "a cloud drill has no baseline arm: the seed's figures stand for it",
    "interruptions[].notice_to_durable_s": "the ledger sums final saves per run; it keeps no "
    "single notice's times",
    "interruptions[].node": "the metrics carry the run, not the node the notice came to",
    "cost": "the quarterly review prices the cluster's cost recordings (docs/goodput.md)",
    "pools": "node time per capacity type is the cost recordings' concern, not the drill's",
    "planner_check": "the planner is checked by the local drill, whose rates are known",
}


class PrometheusError(Exception):
    """Prometheus could not answer, or its answer holds no training run; the message says why,
    in one line."""


def _window_sum(metric: str, by: str, window: str) -> str:
    """A counter's growth over the window as the recording rules count it: a series that started
    inside the window (a new pod, a first notice) counts its last value in full, one that was
    there before counts its increase."""
    return (
        f"sum by ({by}) ((last_over_time({metric}[{window}]) unless {metric} offset {window}) "
        f"or increase({metric}[{window}]))"
    )


def queries(window: str, start: str) -> dict[str, str]:
    """The instant queries, evaluated at the window's end; `window` is its length as a PromQL
    duration, `start` its beginning in unix seconds."""
    return {
        "goodput_s": _window_sum("spotsafe_goodput_seconds_total", "namespace, run", window),
        "badput_s": _window_sum("spotsafe_badput_seconds_total", "namespace, run, cause", window),
        # Pods created inside the window only: an older pod's start is not the drill's.
        "pod_badput_s": "sum by (namespace, run, cause) ("
        f"max_over_time(namespace_pod_cause:spot_training_pod_badput_seconds[{window}]) "
        f"and on (namespace, pod) (max_over_time(kube_pod_created[{window}]) >= {start}))",
        "notices": _window_sum(
            'spotsafe_termination_notices_total{kind="preemption"}',
            "namespace, run, source",
            window,
        ),
        "lost_steps": _window_sum("spotsafe_lost_steps_total", "namespace, run", window),
    }


def planned_queries() -> dict[str, str]:
    """The queries as the dry run shows them, before the window is known."""
    return {**queries("<window>s", "<start>"), "training (range)": TRAINING}


class Prometheus:
    """Prometheus's HTTP API at a URL (e.g. a port-forward to the cluster's), with a bearer
    token when the endpoint asks for one (Google Cloud Managed Service for Prometheus's API)."""

    def __init__(self, url: str, session: Any = None, token: str | None = None) -> None:
        import requests

        self.url = url.rstrip("/")
        self.session = session or requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def _get(self, path: str, params: dict[str, Any]) -> list[dict]:
        import requests

        try:
            answer = self.session.get(f"{self.url}{path}", params=params, timeout=60)
            body = answer.json()
        except requests.RequestException as exc:
            raise PrometheusError(f"Prometheus at {self.url}: {_reason(exc)}") from None
        except ValueError:
            raise PrometheusError(
                f"Prometheus at {self.url}: HTTP {answer.status_code}, not a JSON answer"
            ) from None
        if body.get("status") != "success":
            raise PrometheusError(
                f"Prometheus at {self.url}: {body.get('errorType')}: {body.get('error')}"
            )
        return body["data"]["result"]

    def query(self, promql: str, at: float) -> list[dict]:
        return self._get("/api/v1/query", {"query": promql, "time": at})

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict]:
        return self._get(
            "/api/v1/query_range", {"query": promql, "start": start, "end": end, "step": step}
        )


def _reason(exc: Exception) -> str:
    """What failed, without the connection pool's retry story: e.g. "ConnectionError:
    Connection refused" (the socket's own words, where the message carries them)."""
    errno = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(exc))
    return f"{type(exc).__name__}: {errno.group(1) if errno else str(exc)[:200]}"


def _run(metric: dict[str, str]) -> str:
    return f"{metric.get('namespace', '')}/{metric.get('run', '')}"


def sample_value(sample: dict) -> float:
    """An instant query's sample as a number; a NaN or infinity (an empty ratio) as 0."""
    value = float(sample["value"][1])
    return value if math.isfinite(value) else 0.0


def _longest_stall(values: list[list], start: float, end: float, step: float) -> tuple[float, bool]:
    """The longest time a run's processes did not train, and whether it trains at the end. Each
    point stands for the step from its timestamp on, as Prometheus returns it (its own grid: the
    step it uses is truncated to whole milliseconds); time without a training point (no process
    of the run was there, or it did not step) is time not training."""
    longest, trained_until = 0.0, start
    for t, rate in values:
        if float(rate) >= TRAINING_THRESHOLD:
            longest = max(longest, float(t) - trained_until)
            trained_until = float(t) + step
    return max(longest, end - trained_until), trained_until > end


def read(prometheus: Prometheus, start: float, end: float) -> tuple[dict[str, dict], dict]:
    """Per run: goodput, badput by cause, notices by source, lost steps, its longest stall and
    whether it trains at the end; with the queries as sent."""
    window = f"{max(1, math.ceil(end - start))}s"
    sent = queries(window, f"{start:.0f}")
    runs: dict[str, dict] = {}

    def run(metric: dict[str, str]) -> dict:
        return runs.setdefault(
            _run(metric),
            {
                "goodput_s": 0.0,
                "badput_s": dict.fromkeys(ACCOUNTS, 0.0),
                "notices": {},
                "lost_steps": 0,
                "longest_stall_s": None,
                "training_at_end": False,
            },
        )

    for sample in prometheus.query(sent["goodput_s"], end):
        run(sample["metric"])["goodput_s"] += sample_value(sample)
    for name in ("badput_s", "pod_badput_s"):
        for sample in prometheus.query(sent[name], end):
            cause = sample["metric"].get("cause")
            if cause in CAUSES:
                run(sample["metric"])["badput_s"][cause] += sample_value(sample)
    for sample in prometheus.query(sent["notices"], end):
        notices = run(sample["metric"])["notices"]
        source = sample["metric"].get("source", "unknown")
        notices[source] = notices.get(source, 0) + round(sample_value(sample))
    for sample in prometheus.query(sent["lost_steps"], end):
        run(sample["metric"])["lost_steps"] += round(sample_value(sample))
    step = max(TRAINING_STEP_S, (end - start) / 1000)
    # Prometheus reads the window's edges to the millisecond: its points start at start's.
    edges = round(start, 3), round(end, 3)
    for series in prometheus.query_range(TRAINING, *edges, step):
        entry = run(series["metric"])
        entry["longest_stall_s"], entry["training_at_end"] = _longest_stall(
            series["values"], *edges, step
        )
    sent["training (range)"] = f"{TRAINING} from {start:.0f} to {end:.0f} every {step:g} s"
    if not runs:  # a report of no runs would pass for a drill that lost none
        raise PrometheusError(
            f"Prometheus at {prometheus.url}: no training run in the goodput ledger from "
            f"{iso(start)} to {iso(end)}: is it the cluster's Prometheus, and do runs train on "
            "the class?"
        )
    return runs, sent


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def report(
    runs: dict[str, dict], sent: dict, start: float, end: float, cloud_run: dict[str, Any]
) -> dict:
    """The local drill's report shape (spotctl.drill.report.build) from the runs' ledgers."""
    accounts = {name: Account(r["goodput_s"], r["badput_s"]) for name, r in sorted(runs.items())}
    total = Account()
    for account in accounts.values():
        total.add(account)
    goodput = total.to_json("run_s")
    ratio, run_s, badput = goodput["ratio"], goodput["run_s"], goodput["badput_s"]
    lost = sum(r["lost_steps"] for r in runs.values())
    recovered = [name for name, r in runs.items() if r["training_at_end"]]
    return {
        "kind": "cloud",
        "seed": None,
        "duration_s": end - start,
        "config": cloud_run,
        "window": {"start": iso(start), "end": iso(end), "queries": sent},
        "interruptions": [
            {
                "job": name,
                "node": None,
                "kind": "notice",
                "source": source,
                "lost_steps": None,
                "notice_to_durable_s": None,
                "notice_to_resume_s": None,
            }
            for name, r in sorted(runs.items())
            for source, count in sorted(r["notices"].items())
            for _ in range(count)
        ],
        "pools": None,
        "jobs": [
            {
                "name": name,
                "finished": None,
                "recovered": r["training_at_end"],
                "longest_stall_s": r["longest_stall_s"],
                "notices": sum(r["notices"].values()),
                "lost_steps": r["lost_steps"],
                "manual_interventions": None,
                "weights_sha256": None,
                "reference_sha256": None,
            }
            for name, r in sorted(runs.items())
        ],
        "cost": None,
        "events": [],
        "stockout": None,
        "goodput": {
            **goodput,
            "jobs": {name: account.to_json("run_s") for name, account in accounts.items()},
            "lost_steps": lost,
        },
        "baseline": None,
        "comparison": None,
        "goals": {
            "noticed_lost_steps": lost,
            "goodput": ratio,
            "badput_share": 1 - ratio if run_s > 0 else None,
            "lost_work_share": badput[LOST_WORK] / run_s if run_s > 0 else None,
            "recovered": len(recovered) / len(runs) if runs else None,
            "max_stall_s": max(
                (r["longest_stall_s"] for r in runs.values() if r["longest_stall_s"] is not None),
                default=None,
            ),
            "weights_match_references": None,
            "idle_share": None,
        },
        "planner_check": None,
        "projection": None,
        "not_measured": NOT_MEASURED,
    }


def table(report: dict):
    """Goodput and badput by cause per run, over the drill's window."""
    from rich.table import Table

    g = report["goodput"]
    table = Table(title=f"Goodput over the cloud drill's window ({report['duration_s']:.0f} s)")
    for column in ("run", "time (s)", "goodput", *ACCOUNTS, "notices", "trains at end"):
        table.add_column(column.replace("_", " "), overflow="fold")
    rows = [(name, j, r) for (name, j), r in zip(g["jobs"].items(), report["jobs"], strict=True)]
    for name, j, r in rows:
        total = j["run_s"]
        shares = [f"{j['badput_s'][c] / total:.1%}" if total else "-" for c in ACCOUNTS]
        trains = "yes" if r["recovered"] else "NO"
        table.add_row(name, f"{total:.0f}", f"{j['ratio']:.1%}", *shares, str(r["notices"]), trains)
    total = g["run_s"]
    shares = [f"{g['badput_s'][c] / total:.1%}" if total else "-" for c in ACCOUNTS]
    table.add_row("all runs", f"{total:.0f}", f"{g['ratio']:.1%}", *shares, "", "")
    table.caption = "shares of each run's time in the window, from its ledger and the cluster's"
    return table
