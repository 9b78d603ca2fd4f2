"""Medians, spreads and slopes of repeated timings."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def interleaved(repeats: int, ours: Callable[[], Any], base: Callable[[], Any]) -> tuple:
    """Timings of ours and base, taken in turns, so drift in a shared machine's load hits both
    alike: (ours, base), two lists."""
    pairs = [(timed(ours), timed(base)) for _ in range(repeats)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float]) -> list[float]:
    """[min, max], rounded as the figures are."""
    return [round(min(values), 4), round(max(values), 4)]


def ratios(ours: Sequence[float], base: Sequence[float]) -> list[float]:
    """Per-repetition ratios: their spread is the run-to-run noise a goal's margin must beat."""
    return [o / b for o, b in zip(ours, base, strict=True)]


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (0 with fewer than two distinct xs)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
