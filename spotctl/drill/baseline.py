"""The baseline arm: the same interruption schedule, met as teams use spot without the platform.

A static group of spot nodes, one per job, kept at its size by the cloud (an Auto Scaling group
replaces a reclaimed node once capacity is back) and never scaled down while its job runs. Each
job runs the plain trainer (spotctl.drill.plain_train): periodic checkpoints only, no notice
handling, no verification, and no Job controller to requeue it. A pod that dies stays dead until
someone notices and starts it again, after the manual delay; every such restart is a manual
intervention. The interruptions follow the platform arm's seeded schedule: the same seed draws
the same notice and hard-kill times, served as there (a hard kill waits for a job that trains, a
notice strikes one if one trains).
"""

from __future__ import annotations

import math

from spotctl.drill.cluster import CLOUD_FLAVOURS, SPOT, Cluster
from spotctl.drill.harness import Drill
from spotctl.drill.jobs import Job, Run

PLAIN_TRAINER = "spotctl.drill.plain_train"


class BaselineDrill(Drill):
    trainer = PLAIN_TRAINER

    def _cluster(self) -> Cluster:
        return Cluster.start(self._job_count(), 0, CLOUD_FLAVOURS[self.config.cloud])

    def _job_count(self) -> int:
        return self.config.baseline_job_count

    def _ended(self, job: Job, run: Run, now: float) -> None:
        super()._ended(job, run, now)
        if job.finished:
            run.node.release(now, math.inf)  # the group shrinks by the node no job needs

    def _interrupted(self, job: Job, run: Run, now: float) -> None:
        """Whatever ended the pod, it stays down until someone starts it again."""
        self._record_reached(job, run)
        job.queued_at = now
        self._event(now, "killed", job.name, run.node, f"exit {run.exit_code}")

    def _timed_out(self) -> None:
        """Stalled: the arm ends with its jobs where they are, and the report says so."""

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
