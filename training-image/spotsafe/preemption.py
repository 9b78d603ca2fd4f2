"""What a training loop does with termination notices, at each step boundary.

spotsafe.Run does all of this around a plain loop. A loop of its own uses the guard directly:

with PreemptionGuard.from_env() as guard:
    resumed_from = ckpt.restore(state)
    guard.account_lost_steps(ckpt, resumed_from)   # what an earlier stop failed to save
    while step < steps:
        step += 1
        train_step()
        decision = guard.check()          # all ranks get the same answer
        if decision.checkpoint_now:       # rebalance recommendation: save, keep training
            ckpt.save(step, state)
        else:
            ckpt.maybe_save(step, state)
        if decision.stop:                 # preemption imminent: final save at this step
            break
    if guard.stopped:
        guard.final_save(ckpt, step, state)   # durable, timed against the deadline
sys.exit(EXIT_PREEMPTED if guard.stopped else 0)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

from spotsafe import metrics
from spotsafe.agreement import Agreement, agree
from spotsafe.errors import ObjectMissingError, SpotsafeError
from spotsafe.termination import REBALANCE, TerminationWatcher, WatcherConfig

log = logging.getLogger(__name__)

# EX_TEMPFAIL: "preempted, resume me". The Job's podFailurePolicy ignores it, so a preemption
# never uses up backoffLimit.
EXIT_PREEMPTED = 75
# Written beside the checkpoints before a final save. If the node goes before the save is
# durable, the next attempt reads it and counts the steps that were lost.
STOP_MARKER = "preempted.json"


class PreemptionGuard:
    def __init__(self, watcher: TerminationWatcher) -> None:
        self.watcher = watcher
        self.decision = Agreement(stop=False, checkpoint_now=False, deadline=None)

    @classmethod
    def from_env(cls) -> PreemptionGuard:
        return cls(TerminationWatcher(WatcherConfig.from_env()))

    def __enter__(self) -> PreemptionGuard:
        self.watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, exit_code: int | None = None) -> None:
        """Stop watching. Given the exit code of a run whose work is durable, a later SIGTERM
        ends the process with that code instead of killing it (143, which the Job would count
        as a failure), at any moment up to the process's own exit."""
        if exit_code is None or "sigterm" not in self.watcher.config.sources:
            self.watcher.close()
            return

        def leave(signum: int, frame: object) -> None:
            log.warning("SIGTERM after the run's work is durable: exiting with %d", exit_code)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            # Not SystemExit: raised inside interpreter shutdown it prints a traceback, and
            # user code may catch it.
            os._exit(exit_code)

        self.watcher.close(sigterm_handler=leave)
        # The interpreter sets Python's signal handlers back to the default action late in its
        # shutdown, where a SIGTERM would kill the process; an ignored one it leaves alone.
        atexit.unregister(_ignore_sigterm)
        atexit.register(_ignore_sigterm)

    @property
    def stopped(self) -> bool:
        return self.decision.stop

    def check(self) -> Agreement:
        """Take in new notices and agree with the other ranks; call once per step, on every rank."""
        rebalance = any(n.kind == REBALANCE for n in self.watcher.poll())
        self.decision = agree(self.watcher.preemption, rebalance)
        if self.decision.checkpoint_now:
            log.warning("rebalance recommended: checkpointing now and training on")
        return self.decision

    def final_save(self, ckpt: Any, step: int, state: Mapping[str, Any]) -> dict:
        """Make step `step` durable, timed against the deadline. It is saved unless the newest
        save this Checkpointer started is of that step already (maybe_save took it).

        Returns what the trainer reports: whether the save fitted and how long it took.
        """
        deadline = self.decision.deadline
        expected = ckpt.expected_save_s
        left = deadline - time.time()
        fits = expected is None or expected <= left
        metrics.final_saves.labels(fits_deadline=str(fits).lower()).inc()
        log.warning(
            "preemption: final save at step %d, expected %s, %.1f s left: %s",
            step,
            "unknown (no save measured yet)" if expected is None else f"{expected:.2f} s",
            left,
            "fits" if fits else "may not fit",
        )
        report = {
            "preempted": True,
            "notice_source": self.watcher.preemption.source if self.watcher.preemption else None,
            "deadline": deadline,
            "expected_save_s": expected,
        }
        started = time.time()
        marked = _mark_stop(ckpt, step)
        try:
            if ckpt.last_saved_step != step:
                ckpt.save(step, state)
            ckpt.close()
        except SpotsafeError as e:
            # Still "resume me": the newest committed checkpoint is intact, only these steps go.
            lost = step - (ckpt.last_committed_step or 0)
            log.error("final save at step %d failed, %d step(s) lost: %s", step, lost, e)
            if ckpt.rank == 0 and not marked:  # otherwise the next attempt counts them
                metrics.lost_steps.inc(lost)
            return {**report, "durable_at": None, "fitted_deadline": False}
        durable_at = time.time()
        if durable_at > deadline:
            log.error("final save durable %.1f s after the deadline", durable_at - deadline)
        else:
            log.warning(
                "final save at step %d durable in %.2f s, %.1f s before the deadline",
                step,
                durable_at - started,
                deadline - durable_at,
            )
        return {
            **report,
            "final_save_s": durable_at - started,
            "durable_at": durable_at,
            "fitted_deadline": durable_at <= deadline,
        }

    @staticmethod
    def account_lost_steps(ckpt: Any, resumed_from: int | None) -> int | None:
        """After restore: the steps an earlier attempt stopped at but did not save, counted in
        spotsafe_lost_steps_total. None when no earlier attempt stopped on a notice."""
        if ckpt.rank != 0:
            return None
        try:
            stopped_at = json.loads(ckpt.store.get(STOP_MARKER))["step"]
        except ObjectMissingError:
            return None
        lost = max(0, stopped_at - (resumed_from or 0))
        if lost:
            metrics.lost_steps.inc(lost)
            log.error(
                "the previous attempt stopped at step %d but its final save never became "
                "durable: %d step(s) lost, resuming from %s",
                stopped_at,
                lost,
                resumed_from,
            )
        ckpt.store.delete([STOP_MARKER])
        return lost


def _ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _mark_stop(ckpt: Any, step: int) -> bool:
    if ckpt.rank != 0:
        return False
    try:
        ckpt.store.put(STOP_MARKER, json.dumps({"step": step, "attempt": ckpt.attempt}).encode())
    except SpotsafeError as e:
        log.warning("could not record the stop step for the next attempt: %s", e)
        return False
    return True
