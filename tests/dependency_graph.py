"""What a previewed resource waits for, transitively: the order `pulumi up` creates things in."""

from __future__ import annotations

from functools import cache

from spotctl.preview.resources import PreviewResource, waits_for


class DependencyGraph:
    def __init__(self, resources: list[PreviewResource]) -> None:
        self.by_urn = {r.urn: r for r in resources}

        @cache
        def before(urn: str) -> frozenset[str]:
            direct = waits_for(self.by_urn[urn]) if urn in self.by_urn else []
            return frozenset(direct).union(*(before(d) for d in direct))

        self._before = before

    def before(self, resource: PreviewResource) -> set[str]:
        """URNs of everything that exists before `resource` is created."""
        return set(self._before(resource.urn))

    def waits_for(self, resource: PreviewResource, other: PreviewResource) -> bool:
        return other.urn in self._before(resource.urn)
