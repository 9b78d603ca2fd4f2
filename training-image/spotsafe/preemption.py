"""What a training loop does with termination notices, at each step boundary.

with PreemptionGuard.from_env() as guard:
    while step < steps:
        step += 1
        train_step()
        decision = guard.check()          # all ranks get the same answer
        if decision.checkpoint_now:       # rebalance recommendation: save, keep training
            ckpt.save(step, state)
        if decision.stop:                 # preemption imminent: final save at this step
            break
    guard.final_save(ckpt, step, state)   # durable, timed against the deadline
sys.exit(EXIT_PREEMPTED if guard.stopped else 0)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from spotsafe import metrics
from spotsafe.agreement import Agreement, agree
from spotsafe.errors import SpotsafeError
from spotsafe.termination import REBALANCE, TerminationWatcher, WatcherConfig

log = logging.getLogger(__name__)

# EX_TEMPFAIL: "preempted, resume me". The Job's podFailurePolicy ignores it, so a preemption
# never uses up backoffLimit.
EXIT_PREEMPTED = 75


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
        self.watcher.close()

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

    def final_save(self, ckpt: Any, step: int, state: Mapping[str, Any], saved: bool) -> dict:
        """Make step `step` durable (saving it unless `saved`), timed against the deadline.

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
        started = time.time()
        try:
            if not saved:
                ckpt.save(step, state)
            ckpt.close()
        except SpotsafeError as e:
            # Still "resume me": the newest committed checkpoint is intact, only these steps go.
            lost = step - (ckpt.last_committed_step or 0)
            log.error("final save at step %d failed, %d step(s) lost: %s", step, lost, e)
            metrics.lost_steps.inc(lost)
            return {**self._report(expected), "durable_at": None, "fitted_deadline": False}
        durable_at = time.time()
        if durable_at > deadline:
            # Durable all the same: the node outlived its notice. Had it not, the steps since
            # the previous checkpoint were lost, which the next attempt's resume step shows.
            log.error("final save durable %.1f s after the deadline", durable_at - deadline)
        else:
            log.warning(
                "final save at step %d durable in %.2f s, %.1f s before the deadline",
                step,
                durable_at - started,
                deadline - durable_at,
            )
        return {
            **self._report(expected),
            "final_save_s": durable_at - started,
            "durable_at": durable_at,
            "fitted_deadline": durable_at <= deadline,
        }

    def _report(self, expected_save_s: float | None) -> dict:
        notice = self.watcher.preemption
        return {
            "preempted": True,
            "notice_source": notice.source if notice else None,
            "deadline": self.decision.deadline,
            "expected_save_s": expected_save_s,
        }
