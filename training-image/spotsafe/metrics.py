"""Prometheus metrics of the runtime, on the default registry.

Expose them with ``prometheus_client.start_http_server(port)`` (the example trainer's
``--metrics-port``). The alert rules in the observability component read these names.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from spotsafe import goodput

_SAVE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)

last_committed_step = Gauge(
    "spotsafe_checkpoint_last_committed_step",
    "Step of the newest checkpoint this process committed or restored",
)
last_commit_timestamp = Gauge(
    "spotsafe_checkpoint_last_commit_timestamp_seconds",
    "Unix time of the newest commit (or of the checkpoint restored at start)",
)
checkpoint_age = Gauge(
    "spotsafe_checkpoint_age_seconds", "Seconds since the newest committed checkpoint"
)
save_duration = Histogram(
    "spotsafe_checkpoint_save_duration_seconds",
    "Snapshot to durable commit, per checkpoint",
    buckets=_SAVE_BUCKETS,
)
blocked_duration = Histogram(
    "spotsafe_checkpoint_blocked_seconds",
    "Time the training loop was blocked per save (snapshot, plus waiting for a free slot)",
    buckets=_SAVE_BUCKETS,
)
bytes_written = Counter("spotsafe_checkpoint_bytes_total", "Checkpoint bytes written to storage")
save_failures = Counter(
    "spotsafe_checkpoint_save_failures_total", "Checkpoint saves that failed", ["reason"]
)
saves_skipped = Counter(
    "spotsafe_checkpoint_saves_skipped_total",
    "Due saves maybe_save skipped because the previous one was still in flight",
)
save_interval_steps = Gauge(
    "spotsafe_checkpoint_interval_steps",
    "Steps between the two newest saves started: the checkpoint cadence actually achieved",
)
corrupt_skipped = Counter(
    "spotsafe_checkpoint_corrupt_skipped_total",
    "Committed checkpoints found corrupt at resume and skipped",
)


def record_commit(step: int, at: float | None = None) -> None:
    last_committed_step.set(step)
    last_commit_timestamp.set(at if at is not None else time.time())


def _age() -> float:
    last = last_commit_timestamp._value.get()
    return time.time() - last if last else 0.0


checkpoint_age.set_function(_age)

# ---- termination notices (see spotsafe.termination and spotsafe.preemption) ------------------

notices = Counter(
    "spotsafe_termination_notices_total",
    "Termination notices received, by source (sigterm, aws, gce) and kind (preemption, rebalance)",
    ["source", "kind"],
)
sigterm_lag = Gauge(
    "spotsafe_notice_sigterm_lag_seconds",
    "The drain lag this process allows for: its SIGTERM deadline is the grace less this",
)
notice_source_reachable = Gauge(
    "spotsafe_notice_source_reachable",
    "1 while a watched notice source (aws, gce) answers, 0 while it cannot be reached",
    ["source"],
)
final_saves = Counter(
    "spotsafe_final_saves_total",
    "Final saves after a preemption notice, by whether the measured save time fitted the deadline",
    ["fits_deadline"],
)
lost_steps = Counter(
    "spotsafe_lost_steps_total",
    "Steps since the last durable checkpoint when a final save after a notice failed",
)
training_step = Gauge("spotsafe_training_step", "Step the training loop last completed")
resumed_from_step = Gauge(
    "spotsafe_resumed_from_step", "Step this process resumed from at start; -1 for a fresh start"
)
attempt = Gauge(
    "spotsafe_attempt",
    "The run's attempt this process trains in: its fencing id, unique and increasing in the run "
    "(every rank of an attempt has the same)",
)
redo_until_step = Gauge(
    "spotsafe_redo_until_step",
    "Furthest step the run had reached before this attempt (its progress record): the steps "
    "after the resume step up to this one are computed again, lost work",
)

# ---- goodput (see spotsafe.goodput) -----------------------------------------------------------


class _GoodputCollector(Collector):
    """The ledgers' seconds, read at scrape time: the training thread only adds to floats."""

    def collect(self) -> Iterator[Metric]:
        good = CounterMetricFamily(
            "spotsafe_goodput_seconds",
            "Training step time of steps computed for the first time in the run",
        )
        good.add_metric([], sum(ledger.goodput_s for ledger in goodput.LEDGERS))
        bad = CounterMetricFamily(
            "spotsafe_badput_seconds",
            "Time this process spent on anything but new training steps, by cause",
            labels=["cause"],
        )
        for cause in goodput.IN_POD:
            bad.add_metric([cause], sum(ledger.badput_s[cause] for ledger in goodput.LEDGERS))
        yield good
        yield bad


REGISTRY.register(_GoodputCollector())
