"""Identifiers the mock engine derives from resource names, so a preview is reproducible."""

from __future__ import annotations

import hashlib


def hex_id(seed: str, length: int) -> str:
    """`length` hex digits derived from `seed`."""
    return hashlib.sha256(seed.encode()).hexdigest()[:length]
