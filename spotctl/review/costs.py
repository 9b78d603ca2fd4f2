"""Each team's cost for the quarter, and what its lost work cost, from the cluster's own cost
recordings (components/k8s/rules/spot-training.rules.yaml, docs/goodput.md).

The input is Prometheus's HTTP API answer (`/api/v1/query`, saved as JSON) to `quarter_query`
evaluated at the quarter's end: per team, the USD its pods' GPUs cost ("paid") and the cost of
each cause of their time (goodput and the runtime's badput causes).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

PAID = "paid"
GOODPUT = "goodput"
LOST_WORK = "lost_work"


class CostsError(Exception):
    """A costs file that is not the answer to the quarter's query."""


def quarter_query(days: int) -> str:
    """The PromQL the costs file answers: hourly recordings summed over `days`, hour by hour."""
    window = f"[{days}d:1h]"
    paid = "namespace_gpu_class_capacity_type:spot_training_cost_usd:sum1h"
    causes = "namespace_gpu_class_capacity_type_cause:spot_training_cost_usd:sum1h"
    return (
        f'label_replace(sum by (namespace) (sum_over_time({paid}{window})), "cause", "{PAID}",'
        f' "", "") or sum by (namespace, cause) (sum_over_time({causes}{window}))'
    )


def _samples(path: Path) -> list[tuple[str, str, float]]:
    try:
        answer = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CostsError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise CostsError(f'{path}: not a successful Prometheus answer ("status": "success")')
    data = answer.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise CostsError(f'{path}: data.resultType is not "vector": save an instant query')
    samples = []
    for index, result in enumerate(data.get("result") or []):
        where = f"{path}: data.result[{index}]"
        try:
            metric, (_, text) = result["metric"], result["value"]
            team, cause, usd = metric["namespace"], metric["cause"], float(text)
        except (KeyError, TypeError, ValueError) as exc:
            raise CostsError(f"{where}: not a sample with namespace and cause ({exc})") from None
        if not math.isfinite(usd) or usd < 0:
            raise CostsError(f"{where}: cost {text!r} is not a finite amount")
        samples.append((team, cause, usd))
    return samples


def team_costs(path: Path) -> list[dict[str, Any]]:
    """One row per team: what it paid, the cost of its goodput, of its lost work, of its other
    badput causes (whole USD: a quarter's bill), and lost work's share of what it paid."""
    teams: dict[str, dict[str, float]] = {}
    for team, cause, usd in _samples(path):
        teams.setdefault(team, {})[cause] = usd
    rows = []
    for team, by_cause in sorted(teams.items()):
        if PAID not in by_cause:
            raise CostsError(f'{path}: team {team!r} has causes but no "{PAID}" total')
        paid = by_cause[PAID]
        lost = by_cause.get(LOST_WORK, 0.0)
        other = sum(v for c, v in by_cause.items() if c not in (PAID, GOODPUT, LOST_WORK))
        rows.append(
            {
                "team": team,
                "paid_usd": round(paid),
                "goodput_usd": round(by_cause.get(GOODPUT, 0.0)),
                "lost_work_usd": round(lost),
                "other_badput_usd": round(other),
                "lost_work_share": lost / paid if paid else None,
            }
        )
    return rows
