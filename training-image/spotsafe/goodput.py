"""Goodput accounting: where a run's paid accelerator time goes, across all its attempts.

Goodput is the training time that moved the run forward; badput is the rest, named by cause
(docs/goodput.md gives the definitions and the sources they follow). A pod sees five causes from
inside; the platform adds waiting to be scheduled (kube-state-metrics) and idle nodes (node
metrics). Each process keeps a Ledger, for the price of one clock read per step (and one per
save) on the training thread; ``spotsafe.metrics`` exports it as counters when Prometheus scrapes.

A step counts as goodput the first time the run computes it. Computed again after an
interruption, it is lost work. To know which steps are repeats, each attempt records the furthest
step the run has reached beside the checkpoints (``progress/<attempt>.json``), from a background
thread every ``SPOTSAFE_PROGRESS_S`` seconds (default 30) and when it ends, and the next attempt
reads the newest record. A node lost without notice takes at most one interval of that record
with it: those recomputed steps count as goodput.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from spotsafe.errors import ConfigError, SpotsafeError

if TYPE_CHECKING:  # only named in annotations: `spotctl plan` imports the causes without numpy
    from spotsafe.storage import ObjectStore

log = logging.getLogger("spotsafe")

SCHEDULING = "scheduling"
"""The run waits for a node: queued, or its pod pending (the cluster's view)."""
POD_START = "pod_start"
"""From the pod's scheduling until the runtime starts: node boot, image pull, container
start, then (counted here) the interpreter, imports and model set-up."""
RESTORE = "restore"
"""Finding, fetching and verifying the newest checkpoint, and loading it."""
LOST_WORK = "lost_work"
"""Steps computed again because an interruption lost them."""
BLOCKING_SAVES = "blocking_saves"
"""The part of a save that holds the training loop: the snapshot, a wait for a free slot, the
save at the end of the run."""
FINAL_SAVES = "final_saves"
"""The final save after a termination notice, until it is durable."""
IDLE_NODES = "idle_nodes"
"""A node that is up with no training pod on it (the node metrics' view)."""

CAUSES = (SCHEDULING, POD_START, RESTORE, LOST_WORK, BLOCKING_SAVES, FINAL_SAVES, IDLE_NODES)
IN_POD = (POD_START, RESTORE, LOST_WORK, BLOCKING_SAVES, FINAL_SAVES)
"""The causes a training process measures itself."""
RESTARTS = (SCHEDULING, POD_START, RESTORE)
"""From an interruption until training again: what `spotctl plan` calls a restart."""

PROGRESS_PREFIX = "progress/"
PROGRESS_ENV = "SPOTSAFE_PROGRESS_S"
DEFAULT_PROGRESS_S = 30.0

LEDGERS: list[Ledger] = []
"""Every ledger of this process; the metrics sum them."""
_IMPORTED_AT = time.monotonic()
_pod_started = False


class Ledger:
    """One process's seconds: goodput, and badput by the causes a pod sees (IN_POD).

    The clock runs from one call to the next: each call gives the time since the previous one
    to a cause (``charge``) or to a step (``step``).
    """

    def __init__(self) -> None:
        self.goodput_s = 0.0
        self.badput_s = dict.fromkeys(IN_POD, 0.0)
        self.redo_until = 0
        """Steps up to this one were reached by an earlier attempt: computing them is lost work."""
        self._mark = time.monotonic()
        LEDGERS.append(self)

    def start(self) -> None:
        """The runtime starts: the process's time so far is pod start (for the first ledger of
        a process; a later one starts its clock now)."""
        global _pod_started
        if not _pod_started:
            _pod_started = True
            age = process_age_s()
            since = time.monotonic() - _IMPORTED_AT if age is None else age
            self.badput_s[POD_START] += since
        self._mark = time.monotonic()

    def charge(self, cause: str) -> None:
        self.badput_s[cause] += self._lap()

    def step(self, step: int) -> None:
        """Step `step` is done: its time is goodput, or lost work when it is a repeat."""
        if step <= self.redo_until:
            self.badput_s[LOST_WORK] += self._lap()
        else:
            self.goodput_s += self._lap()

    def _lap(self) -> float:
        now = time.monotonic()
        seconds, self._mark = now - self._mark, now
        return seconds

    def to_json(self) -> dict:
        return {"goodput_s": self.goodput_s, "badput_s": dict(self.badput_s)}


def process_age_s() -> float | None:
    """Seconds since this process started, from Linux's /proc; None elsewhere."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            started = float(stat.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as uptime:
            up = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, up - started / os.sysconf("SC_CLK_TCK"))


def progress_every_s() -> float:
    raw = os.environ.get(PROGRESS_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_PROGRESS_S
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{PROGRESS_ENV}={raw!r} must be a positive number of seconds")
    return value


def _key(attempt: int) -> str:
    return f"{PROGRESS_PREFIX}{attempt:010d}.json"


def reached_before(store: ObjectStore, attempt: int) -> int:
    """The furthest step the run had reached by the newest record of an earlier attempt; 0 when
    none recorded one."""
    try:
        earlier = sorted(
            int(name)
            for o in store.list(PROGRESS_PREFIX)
            if (name := o.key[len(PROGRESS_PREFIX) :].removesuffix(".json")).isdigit()
            and int(name) < attempt
        )
        return int(json.loads(store.get(_key(earlier[-1])))["step"]) if earlier else 0
    except (SpotsafeError, ValueError, KeyError) as e:
        log.warning("goodput: cannot read the previous attempt's progress (%s); no lost work", e)
        return 0


class ProgressRecorder:
    """Writes the furthest step the run has reached, from its own thread, whenever it moved
    beyond `recorded`, the step on record already (the checkpoint, earlier attempts' records):
    an attempt that trains nothing writes nothing."""

    def __init__(
        self,
        store: ObjectStore,
        attempt: int,
        reached: Callable[[], int],
        every_s: float,
        recorded: int = 0,
    ) -> None:
        self.store, self.key, self.reached, self.every_s = store, _key(attempt), reached, every_s
        self._written = recorded
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="spotsafe-progress", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._write()

    def _write(self) -> None:
        step = self.reached()
        if step <= self._written:
            return
        try:
            self.store.put(self.key, json.dumps({"step": step, "at": time.time()}).encode())
            self._written = step
        except SpotsafeError as e:
            log.debug("goodput: progress at step %d not recorded: %s", step, e)

    def close(self, final: bool = True) -> None:
        """Stop; with `final`, record the step reached once more."""
        self._stop.set()
        self._thread.join()
        if final:
            self._write()
