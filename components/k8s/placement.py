"""Where a pool's pods run: the node labels that select the pool and the taints that guard it."""

from __future__ import annotations

from dataclasses import dataclass

from components.pools import CAPACITY_TYPE_LABEL, POOL_LABEL, SPOT_TAINT, Taint


@dataclass(frozen=True)
class Placement:
    """Capacity as the scheduler sees it: the labels its nodes carry, the taints they bear."""

    node_labels: dict[str, str]
    taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        if not self.node_labels:
            raise ValueError("a placement needs at least one node label to select its nodes")

    def tolerations(self) -> list[dict]:
        return [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
            for t in self.taints
        ]

    def node_selector_term(self) -> dict:
        return {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value]}
                for key, value in sorted(self.node_labels.items())
            ]
        }


# Every spot node, whatever its pool, and every on-demand node (stable, and buffer when it trains).
SPOT = Placement({CAPACITY_TYPE_LABEL: "spot"}, (SPOT_TAINT,))
ON_DEMAND = Placement({CAPACITY_TYPE_LABEL: "on-demand"})
# The on-demand tier that is never scaled down on a schedule: coordination services.
STABLE = Placement({POOL_LABEL: "stable"})
