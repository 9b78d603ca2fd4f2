"""A previewed stack with lookups by type, name and parent."""

from __future__ import annotations

from spotctl.preview.resources import PreviewResource


class Preview:
    """One stack's previewed resources, with lookups by type and name."""

    def __init__(self, stack: str, resources: list[PreviewResource]) -> None:
        self.stack, self.resources = stack, resources
        self.by_urn = {r.urn: r for r in resources}

    def of_type(self, token: str) -> list[PreviewResource]:
        return [r for r in self.resources if r.type == token]

    def one(self, token: str, name_contains: str = "") -> PreviewResource:
        found = [r for r in self.of_type(token) if name_contains in r.name]
        assert len(found) == 1, f"expected one {token} named *{name_contains}*, got {found}"
        return found[0]

    def children(self, parent: PreviewResource) -> list[PreviewResource]:
        return [r for r in self.resources if r.parent == parent.urn]
