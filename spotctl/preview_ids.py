"""Identifiers the mock engine derives from a resource's logical name, so that a preview is
reproducible: the same stack previews to the same ids, names and addresses every time."""

from __future__ import annotations

import hashlib


def stable_hex(seed: str, length: int) -> str:
    """`length` hex digits that depend on `seed` alone."""
    return hashlib.sha256(seed.encode()).hexdigest()[:length]
