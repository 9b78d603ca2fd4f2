"""Prometheus metrics of the spotsafe runtime, in the default registry."""

from __future__ import annotations

from prometheus_client import Counter

NOTICES = Counter(
    "spotsafe_termination_notices_total",
    "Termination notices received, by source and kind (preemption or rebalance).",
    ["source", "kind"],
)
