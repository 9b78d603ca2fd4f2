"""The GPU-hour prices of a stack as Prometheus recordings, for the cost rules of
rules/spot-training.rules.yaml: one constant series per GPU class and capacity type.

Prices come from the stack's config (`kubernetes.monitoring`), not from the instance type
catalog: the catalog is the same for every region, and prices are not.
"""

from __future__ import annotations

from collections.abc import Iterable

from components.config import MonitoringConfig
from components.pools import CAPACITIES

PRICE_RECORD = "gpu_class_capacity_type:spot_training_gpu_hour_usd:price"
GROUP = "spot-training-prices"


def price_group(monitoring: MonitoringConfig, gpu_classes: Iterable[str]) -> dict:
    """A rule group recording each class's spot and on-demand GPU-hour price."""
    rules = []
    for gpu_class in gpu_classes:
        prices = monitoring.prices_of(gpu_class)
        for capacity in CAPACITIES:
            price = prices.spot if capacity == "spot" else prices.on_demand
            rules.append(
                {
                    "record": PRICE_RECORD,
                    "expr": f"vector({price})",
                    "labels": {"label_gpu_class": gpu_class, "label_capacity_type": capacity},
                }
            )
    return {"name": GROUP, "rules": rules}
