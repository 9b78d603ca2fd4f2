"""The drill loop: the cloud (provisioning, seeded preemptions, reclaims) and the Job controller
(requeue, placement, restarts from checkpoints). A drill harness, not a production scheduler."""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from spotsafe.preemption import EXIT_PREEMPTED

from spotctl.drill.cluster import CLOUD_FLAVOURS, ON_DEMAND, SPOT, Cluster, Node
from spotctl.drill.config import DrillConfig
from spotctl.drill.jobs import TRAINER, Interruption, Job, JobSpec, Run

TICK_S = 0.2
"""How often the loop looks at the cloud and the jobs; a pod's exit wakes it at once."""
# Unexpected pod failures a Job retries (its backoffLimit) before a human has to step in.
BACKOFF_LIMIT = 2


@dataclass
class Event:
    at: float
    kind: str
    """placed, notice, hard-kill, reclaimed, drain, preempted, finished, failed, spot-dry; in
    the baseline arm also killed (a pod that died without being preempted cleanly)."""
    job: str | None
    node: str
    detail: str = ""
    waited_s: float | None = None
    """For a placement: how long the job was queued."""


@dataclass
class Outcome:
    started_at: float
    ended_at: float
    jobs: list[Job]
    cluster: Cluster
    interruptions: list[Interruption]
    events: list[Event]
    runs: list[Run]


class Drill:
    """The platform arm: jobs on the spot training platform."""

    trainer = TRAINER

    def __init__(
        self,
        config: DrillConfig,
        bucket_uri: str,
        env: dict[str, str],
        logs: Path,
        on_event: Callable[[Event], None] = lambda e: None,
    ) -> None:
        self.config = config
        self.env = env
        self.logs = logs
        self.on_event = on_event
        self.rng = random.Random(config.seed)
        self.cluster = self._cluster()
        self.jobs = [
            Job(
                JobSpec(
                    f"job-{i + 1}",
                    seed=config.seed * 100 + i,
                    steps=config.steps,
                    every_steps=config.every_steps,
                    size=config.size,
                    trainer=self.trainer,
                ),
                uri=f"{bucket_uri}/job-{i + 1}",
                queued_at=None,
            )
            for i in range(self._job_count())
        ]
        self.interruptions: list[Interruption] = []
        self.events: list[Event] = []
        self.runs: list[Run] = []
        self.notice_times, self.kill_times = self._schedule()
        self.started_at = 0.0
        self._exited = threading.Event()  # a pod's process ended: the loop looks at once
        # (job, when it was queued) of the waits in which a spot launch already failed.
        self._dry_waits: set[tuple[str, float]] = set()

    def _cluster(self) -> Cluster:
        return Cluster.start(
            self.config.spot_nodes, self.config.on_demand_nodes, CLOUD_FLAVOURS[self.config.cloud]
        )

    def _job_count(self) -> int:
        return self.config.jobs

    def _schedule(self) -> tuple[list[float], list[float]]:
        """Seeded offsets from the start: a Poisson process of notices, uniform hard kills."""
        notices, t = [], 0.0
        rate = self.config.notices_per_min / 60
        while rate > 0:
            t += self.rng.expovariate(rate)
            if t > self.config.timeout_s:
                break
            notices.append(t)
        low, high = self.config.hard_kill_window_s
        kills = sorted(self.rng.uniform(low, high) for _ in range(self.config.hard_kills))
        return notices, kills

    def _event(
        self, now: float, kind: str, job: str | None, where: Node | str, detail: str = ""
    ) -> None:
        """`where`: the node, or the pool when no node is involved."""
        event = Event(now, kind, job, where if isinstance(where, str) else where.name, detail)
        self.events.append(event)
        self.on_event(event)

    # ---- the run -----------------------------------------------------------------------------

    def run(self, on_tick: Callable[[Drill], None] = lambda d: None) -> Outcome:
        start = self.started_at = time.time()
        for job in self.jobs:
            job.queued_at = start
        # The deadline follows the jobs' steps: a slow machine makes the drill slow, a drill
        # whose steps stop advancing ends.
        steps, advanced_at = 0, start
        try:
            while not all(j.finished or j.failed for j in self.jobs):
                self._exited.clear()  # before the look: an exit during it wakes the next one
                now = time.time()
                if sum(j.progress for j in self.jobs) > steps:
                    steps, advanced_at = sum(j.progress for j in self.jobs), now
                if now - advanced_at > self.config.timeout_s:
                    self._timed_out()
                    break
                self._observe(now)
                self._inject(now, start)
                self._reclaim(now)
                self._migrate_final_phases(now)
                self._autoscale(now)
                self._place(now)
                on_tick(self)
                self._exited.wait(TICK_S)
        finally:
            for job in self.jobs:
                if job.run is not None:
                    job.run.kill()
            end = time.time()
            self.cluster.finish(end)
            self.cluster.close()
        return Outcome(
            start, end, self.jobs, self.cluster, self.interruptions, self.events, self.runs
        )

    def _timed_out(self) -> None:
        raise TimeoutError(f"no job's step advanced for {self.config.timeout_s:.0f} s")

    def _observe(self, now: float) -> None:
        for job in self.jobs:
            run = job.run
            if run is None:
                continue
            if run.scrape(now):
                for interruption in job.open_interruptions:
                    interruption.resumed_at = run.training_from or now
                    interruption.resumed_from = run.resumed_from
                job.open_interruptions.clear()
            if run.reap(now):
                self._ended(job, run, now)

    def _ended(self, job: Job, run: Run, now: float) -> None:
        if not self._finished(job, run, now):
            self._interrupted(job, run, now)
        self._vacate(run.node, now)

    def _interrupted(self, job: Job, run: Run, now: float) -> None:
        """The pod ended short of the job's last step: preempted (exit 75), or failed."""
        self._record_reached(job, run)
        if run.exit_code == EXIT_PREEMPTED:
            self._event(now, "preempted", job.name, run.node, run.stopping or "")
            job.queued_at = now
        else:
            job.manual_interventions += 1
            self._event(now, "failed", job.name, run.node, f"exit {run.exit_code}")
            job.failed = job.manual_interventions > BACKOFF_LIMIT
            job.queued_at = None if job.failed else now

    def _record_reached(self, job: Job, run: Run) -> None:
        """The interruptions that ended this pod: how far it got, and its final save."""
        result = run.result or {}
        for interruption in job.open_interruptions:
            if interruption.reached_step is None:
                interruption.reached_step = run.reached
                interruption.durable_at = result.get("durable_at")
                interruption.fitted_deadline = result.get("fitted_deadline")

    def _finished(self, job: Job, run: Run, now: float) -> bool:
        """Whether the pod ended the job: its last step trained, exit 0."""
        if run.exit_code != 0 or (run.result or {}).get("final_step") != job.spec.steps:
            return False
        job.finished = True
        for interruption in job.open_interruptions:
            if interruption.reached_step is None:
                # A notice that met this pod already past its last step interrupted nothing.
                self.interruptions.remove(interruption)
            else:
                # An earlier pod's: this one resumed it and finished between two scrapes.
                interruption.resumed_at = run.training_from or now
                interruption.resumed_from = (run.result or {}).get("resumed_from")
        job.open_interruptions.clear()
        self._event(now, "finished", job.name, run.node)
        return True

    def _vacate(self, node: Node, now: float) -> None:
        """Its pod has gone."""
        if node.reclaim_at is not None:
            # Drained ahead of its reclaim: the instance goes, a replacement comes later.
            node.release(now, node.reclaim_at + self.config.spot_return_s)
        else:
            node.empty_since = now

    # ---- the cloud ---------------------------------------------------------------------------

    def _victims(self) -> list[Run]:
        """Pods training on spot, undisturbed, short of their last step."""
        runs = [j.run for j in self.jobs if j.run is not None]
        return [
            r
            for r in runs
            if r.node.pool == SPOT and r.training and not r.stopping and r.step < r.spec.steps
        ]

    def _inject(self, now: float, start: float) -> None:
        """Fire what is due on a job training on spot. A hard kill waits for one: they are few,
        and each is meant to land. A notice that finds none strikes no job: the cloud's schedule
        does not wait for a pod to train, so an arm that is back training sooner is not struck
        more often than one whose jobs lie idle."""
        victims = self._victims()
        if self.kill_times and now - start >= self.kill_times[0] and victims:
            self.kill_times.pop(0)
            self._hard_kill(self.rng.choice(victims), now)
        while self.notice_times and now - start >= self.notice_times[0]:
            self.notice_times.pop(0)
            if victims := self._victims():
                self._notice(self.rng.choice(victims), now)

    def _job_of(self, run: Run) -> Job:
        return next(j for j in self.jobs if j.run is run)

    def _notice(self, run: Run, now: float) -> None:
        job, node = self._job_of(run), run.node
        run.stopping = "notice"
        interruption = Interruption(job.name, node.name, "notice", node.flavour, now)
        self.interruptions.append(interruption)
        job.open_interruptions.append(interruption)
        node.announce_preemption(now, self.config.notice_s, run.terminate)
        self._event(now, "notice", job.name, node, node.flavour)

    def _hard_kill(self, run: Run, now: float) -> None:
        job, node = self._job_of(run), run.node
        ended = run.kill()
        interruption = Interruption(job.name, node.name, "hard", None, now, run.step)
        self.interruptions.append(interruption)
        job.open_interruptions.append(interruption)
        job.queued_at = ended
        node.release(ended, now + self.config.spot_return_s)
        self._event(now, "hard-kill", job.name, node)

    def _reclaim(self, now: float) -> None:
        """Notices whose deadline passed: the node goes, with whatever still runs on it."""
        for node in self.cluster.nodes:
            if node.reclaim_at is None or now < node.reclaim_at:
                continue
            job = next((j for j in self.jobs if j.run is not None and j.run.node is node), None)
            run = job.run if job is not None else None
            gone = now
            if run is not None and run.reap(now):
                self._ended(job, run, now)  # it exited just in time
            elif run is not None:
                gone = job.queued_at = run.kill()
                self._record_reached(job, run)
                self._event(now, "reclaimed", job.name, node, "killed at the deadline")
            node.release(gone, now + self.config.spot_return_s)

    # ---- the Job controller and the queue ----------------------------------------------------

    def _autoscale(self, now: float) -> None:
        self.cluster.scale_down(now, self.config.scale_down_s)

    def _migrate_final_phases(self, now: float) -> None:
        """A job on spot that enters its final phase is drained to on-demand when room is there."""
        if self.config.final_phase <= 0:
            return
        for run in self._victims():
            job = self._job_of(run)
            if job.in_final_phase(self.config.final_phase) and self.cluster.free_node(
                ON_DEMAND, now
            ):
                run.stopping = "drain"
                run.terminate()
                self._event(now, "drain", job.name, run.node, "final phase to on-demand")
                return  # one at a time: the next one waits for the next free node

    def spot_dry(self, now: float) -> bool:
        """Whether spot capacity cannot be provisioned now (the configured stockout)."""
        window = self.config.stockout_s
        return window is not None and window[0] <= now - self.started_at < window[1]

    def _place(self, now: float) -> None:
        """The provisioner: the preferred pool first; when it has no node (or, for spot, the
        cloud cannot provision one), the other pool once the job has waited the configured time."""
        pending = [j for j in self.jobs if j.queued_at is not None and j.run is None]
        provisionable = {SPOT: not self.spot_dry(now), ON_DEMAND: True}
        for job in sorted(pending, key=lambda j: j.queued_at):
            final = self.config.final_phase > 0 and job.in_final_phase(self.config.final_phase)
            preferred, fallback = (ON_DEMAND, SPOT) if final else (SPOT, ON_DEMAND)
            node = self.cluster.free_node(preferred, now, provisionable[preferred])
            if node is None and preferred == SPOT and not provisionable[SPOT]:
                self._spot_dry_for(job, now)
            if node is None and now - job.queued_at >= self.config.on_demand_after_s:
                node = self.cluster.free_node(fallback, now, provisionable[fallback])
            if node is not None:
                self._start(job, node, now)

    def _spot_dry_for(self, job: Job, now: float) -> None:
        """A spot launch for the job failed: an event, once per wait."""
        wait = (job.name, job.queued_at)
        if wait not in self._dry_waits:
            self._dry_waits.add(wait)
            self._event(now, "spot-dry", job.name, SPOT, "insufficient spot capacity")

    def _start(self, job: Job, node: Node, now: float) -> None:
        node.provision(now)
        env = {**self.env, **node.trainer_env(self.config.notice_s, self.config.imds_poll_s)}
        attempt = len(job.runs) + 1
        run = Run.launch(job.spec, node, job.uri, env, self.logs, attempt, now, self._exited)
        job.runs.append(run)
        self.runs.append(run)
        event = Event(now, "placed", job.name, node.name, f"from step {job.progress}")
        # A pod killed in this look was queued when it died, a moment after the look began.
        event.waited_s = max(0.0, now - job.queued_at)
        for interruption in job.open_interruptions:
            interruption.waited_s += event.waited_s
        job.queued_at = None
        self.events.append(event)
        self.on_event(event)


def reference_runs(specs: list[JobSpec], bucket_uri: str, env: dict[str, str]) -> dict[str, str]:
    """weights_sha256 of an uninterrupted run of each job, as many at once as there are CPUs."""

    def reference(spec: JobSpec) -> str:
        # Saving only at the end: the cadence never changes the weights, resume is exact.
        once = JobSpec(spec.name, spec.seed, spec.steps, spec.steps, spec.size)
        result = subprocess.run(
            once.argv(f"{bucket_uri}/reference/{spec.name}"),
            capture_output=True,
            env={**os.environ, **env, "SPOTSAFE_NOTICE_SOURCES": "sigterm"},
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"the uninterrupted reference run of {spec.name} failed: {result.stderr[-500:]}"
            )
        return json.loads(result.stdout.strip().splitlines()[-1])["weights_sha256"]

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return dict(zip((s.name for s in specs), pool.map(reference, specs), strict=True))
