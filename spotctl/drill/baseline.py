"""The baseline arm: the same interruptions, met the way teams use spot without this platform.

A static group of spot nodes, one per job, kept at its size by the cloud (an Auto Scaling group
replaces a reclaimed node once capacity is back) and never scaled down while its job runs. Each
job runs the plain trainer (spotctl.drill.plain_train): periodic checkpoints only, no notice
handling, no verification, and no Job controller to requeue it. A pod that dies stays dead until
someone notices and starts it again, after the manual delay; every such restart is a manual
intervention. The interruptions are the platform arm's, in the same order and kinds, each due at
the same offset from the start; as in the platform arm, one that finds no job training waits for
one, so each arm meets every interruption with a job.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from spotctl.drill.cluster import SPOT, Cluster
from spotctl.drill.config import DrillConfig
from spotctl.drill.harness import Drill, Event, Outcome
from spotctl.drill.jobs import Job, Run

PLAIN_TRAINER = "spotctl.drill.plain_train"


def schedule_of(outcome: Outcome) -> tuple[list[float], list[float]]:
    """The offsets from the start at which the platform arm served its notices and hard kills."""
    offsets = {
        kind: [e.at - outcome.started_at for e in outcome.events if e.kind == kind]
        for kind in ("notice", "hard-kill")
    }
    return offsets["notice"], offsets["hard-kill"]


class BaselineDrill(Drill):
    trainer = PLAIN_TRAINER

    def __init__(
        self,
        config: DrillConfig,
        schedule: tuple[list[float], list[float]],
        bucket_uri: str,
        env: dict[str, str],
        logs: Path,
        on_event: Callable[[Event], None] = lambda e: None,
    ) -> None:
        self._replayed = schedule
        super().__init__(config, bucket_uri, env, logs, on_event)

    def _cluster(self) -> Cluster:
        return Cluster.start(self._job_count(), 0)

    def _job_count(self) -> int:
        return self.config.baseline_job_count

    def _schedule(self) -> tuple[list[float], list[float]]:
        notices, kills = self._replayed
        return list(notices), list(kills)

    def _ended(self, job: Job, run: Run, now: float) -> None:
        node = run.node
        if run.exit_code == 0 and (run.result or {}).get("final_step") == job.spec.steps:
            job.finished = True
            job.open_interruptions.clear()
            self._event(now, "finished", job.name, node)
            node.release(now, math.inf)  # the group shrinks by the node its job no longer needs
            return
        for interruption in job.open_interruptions:
            if interruption.reached_step is None:
                interruption.reached_step = run.step
        self._requeue(job, now)
        self._event(now, "killed", job.name, node, f"exit {run.exit_code}")
        if node.reclaim_at is not None:
            node.release(now, node.reclaim_at + self.config.spot_return_s)
        else:
            node.empty_since = now

    def _timed_out(self) -> None:
        """Out of time: the arm ends with its jobs where they are, and the report says so."""

    def _autoscale(self, now: float) -> None:
        """The group keeps its size: a node whose capacity is back comes up, empty."""
        for node in self.cluster.nodes:
            if not node.up and now >= node.available_at:
                node.provision(now)
                node.empty_since = now

    def _migrate_final_phases(self, now: float) -> None:
        """No final phase: the group has spot nodes only."""

    def _place(self, now: float) -> None:
        """A job starts at once the first time; after its pod died, only once someone has
        noticed (the manual delay), on any empty node of the group."""
        for job in self.jobs:
            if job.queued_at is None or job.run is not None:
                continue
            if job.runs and now - job.queued_at < self.config.manual_delay_s:
                continue
            node = self.cluster.free_node(SPOT, now, can_provision=False)
            if node is None:
                continue
            if job.runs:
                job.manual_interventions += 1
            self._start(job, node, now)
