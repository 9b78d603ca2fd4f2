"""Training jobs as the Kubernetes Job controller sees them: pods (runs of the example trainer as
real processes) that start, report through their metrics endpoint, and end with an exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from spotsafe.goodput import POD_START, RESTORE
from spotsafe.local.servers import free_port

from spotctl.drill.cluster import Node

_SCRAPE_TIMEOUT_S = 0.5
TRAINER = "spotsafe.examples.train"
"""The trainer module a pod runs; the baseline arm runs spotctl.drill.plain_train."""
_STEP = "spotsafe_training_step"
_RESUMED = "spotsafe_resumed_from_step"
_GOODPUT = "spotsafe_goodput_seconds"
_BADPUT = "spotsafe_badput_seconds"


@dataclass(frozen=True)
class JobSpec:
    name: str
    seed: int
    steps: int
    every_steps: int
    size: str
    trainer: str = TRAINER

    def argv(self, checkpoint_uri: str, metrics_port: int | None = None) -> list[str]:
        argv = [sys.executable, "-m", self.trainer, "--steps", str(self.steps)]
        argv += ["--checkpoint-uri", checkpoint_uri, "--every-steps", str(self.every_steps)]
        argv += ["--seed", str(self.seed), "--size", self.size]
        if metrics_port is not None:
            argv += ["--metrics-port", str(metrics_port)]
        return argv


@dataclass(eq=False)
class Interruption:
    job: str
    node: str
    kind: str
    """Either "notice" (announced, then reclaimed) or "hard" (SIGKILL, no notice)."""
    source: str | None
    at: float
    """When the cloud announced the notice, or killed the node."""
    reached_step: int | None = None
    durable_at: float | None = None
    fitted_deadline: bool | None = None
    resumed_at: float | None = None
    resumed_from: int | None = None
    waited_s: float = 0.0
    """Of the time until resumed_at, how long the job waited for a node (scheduling)."""

    @property
    def lost_steps(self) -> int | None:
        if self.reached_step is None or self.resumed_at is None:
            return None
        return max(0, self.reached_step - (self.resumed_from or 0))

    def to_json(self) -> dict:
        return {
            "job": self.job,
            "node": self.node,
            "kind": self.kind,
            "source": self.source,
            "lost_steps": self.lost_steps,
            "notice_to_durable_s": None if self.durable_at is None else self.durable_at - self.at,
            "notice_to_resume_s": None if self.resumed_at is None else self.resumed_at - self.at,
            "waited_for_node_s": self.waited_s,
            "fitted_deadline": self.fitted_deadline,
        }


@dataclass(eq=False)
class Run:
    """One pod of a job on one node."""

    spec: JobSpec
    node: Node
    proc: subprocess.Popen
    metrics_port: int
    stdout: Path
    started_at: float
    step: int = 0
    resumed_from: int | None = None
    first_step_at: float | None = None
    last_progress_at: float | None = None
    stopping: str | None = None
    """Why it was told to stop: "notice" or "drain"; None while it trains undisturbed."""
    ended_at: float | None = None
    exit_code: int | None = None
    result: dict | None = None
    ledger: dict | None = None
    """The trainer's goodput and badput seconds (spotsafe.goodput.Ledger.to_json): its JSON
    line's at exit, else its metrics' last scrape; None until the trainer serves them."""

    @classmethod
    def launch(
        cls,
        spec: JobSpec,
        node: Node,
        uri: str,
        env: dict[str, str],
        logs: Path,
        attempt: int,
        now: float,
        exited: threading.Event,
    ) -> Run:
        """Start the pod, placed at `now` (its process's start is part of the pod's start).
        `exited` is set when its process ends, so the Job controller reacts at once, as a
        watch on the pod would, rather than at its next look."""
        port = free_port()
        stem = logs / f"{spec.name}-{attempt:02d}-{node.name}"
        stdout = stem.with_suffix(".out")
        with stdout.open("w") as out, stem.with_suffix(".log").open("w") as err:
            proc = subprocess.Popen(
                spec.argv(uri, port), stdout=out, stderr=err, env={**os.environ, **env}
            )
        threading.Thread(target=lambda: (proc.wait(), exited.set()), daemon=True).start()
        return cls(spec, node, proc, port, stdout, now)

    @property
    def training(self) -> bool:
        return self.first_step_at is not None and self.ended_at is None

    @property
    def training_from(self) -> float | None:
        """When its first step began, by the trainer's own clock: its placement, then its
        ledger's pod start and restore; None until the ledger has them. A scrape sees the step
        up to a tick later, a lag of the drill's and not of the pod."""
        seen = (self.ledger or {}).get("badput_s", {})
        if not seen.get(POD_START):
            return None
        return self.started_at + seen[POD_START] + seen.get(RESTORE, 0.0)

    def scrape(self, now: float) -> bool:
        """Read the pod's step from its metrics endpoint; True on its first step."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            text = urllib.request.urlopen(url, timeout=_SCRAPE_TIMEOUT_S).read().decode()
        except OSError:
            return False  # not serving yet, or already gone
        families = {f.name: f.samples for f in text_string_to_metric_families(text) if f.samples}
        if _GOODPUT in families:
            self.ledger = {
                "goodput_s": families[_GOODPUT][0].value,
                "badput_s": {s.labels["cause"]: s.value for s in families[_BADPUT]},
            }
        step = int(families[_STEP][0].value) if _STEP in families else 0
        if step > self.step:
            self.step, self.last_progress_at = step, now
        if step and self.first_step_at is None:
            self.first_step_at = now
            resumed = int(families[_RESUMED][0].value) if _RESUMED in families else -1
            self.resumed_from = None if resumed < 0 else resumed
            return True
        return False

    def terminate(self) -> None:
        """The node's shutdown reaches the pod (SIGTERM). Its step is read first: a trainer
        that dies of it, handling no notice, leaves no other record of how far it got."""
        self.scrape(time.time())
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> float:
        """The node disappears under the pod; when it ended. The pod's metrics are read just
        before, so its ledger never counts past its end."""
        self.scrape(time.time())
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.ended_at, self.exit_code = time.time(), self.proc.returncode
        return self.ended_at

    def reap(self, now: float) -> bool:
        """True once the process has exited; reads its last stdout line."""
        if self.ended_at is not None:
            return True
        if self.proc.poll() is None:
            return False
        self.ended_at, self.exit_code = now, self.proc.returncode
        lines = self.stdout.read_text().strip().splitlines()
        try:
            self.result = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            self.result = None
        self.ledger = (self.result or {}).get("goodput", self.ledger)
        return True

    @property
    def reached(self) -> int:
        """The step the pod reached: its JSON line's, else its metrics' last."""
        return (self.result or {}).get("final_step", self.step)


@dataclass(eq=False)
class Job:
    spec: JobSpec
    uri: str
    queued_at: float | None
    runs: list[Run] = field(default_factory=list)
    open_interruptions: list[Interruption] = field(default_factory=list)
    finished: bool = False
    failed: bool = False
    manual_interventions: int = 0
    reference_sha256: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def run(self) -> Run | None:
        last = self.runs[-1] if self.runs else None
        return last if last is not None and last.ended_at is None else None

    @property
    def progress(self) -> int:
        return max((r.reached for r in self.runs), default=0)

    @property
    def weights_sha256(self) -> str | None:
        return (self.runs[-1].result or {}).get("weights_sha256") if self.finished else None

    def in_final_phase(self, final_phase: float) -> bool:
        return self.progress >= (1 - final_phase) * self.spec.steps
