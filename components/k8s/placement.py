"""Where a pool's pods run: the node labels that select the pool and the taints that guard it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str = "NoSchedule"

    def toleration(self) -> dict:
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class Placement:
    """A node pool as seen by the scheduler: the labels its nodes carry and the taints they bear."""

    node_labels: dict[str, str]
    taints: tuple[Taint, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.node_labels:
            raise ValueError("a placement needs at least one node label to select its pool")

    def tolerations(self) -> list[dict]:
        return [taint.toleration() for taint in self.taints]

    def node_selector_term(self) -> dict:
        return {
            "matchExpressions": [
                {"key": key, "operator": "In", "values": [value]}
                for key, value in sorted(self.node_labels.items())
            ]
        }
