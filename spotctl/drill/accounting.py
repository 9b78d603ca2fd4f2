"""Goodput of one drill arm: where the time went, by the runtime's causes (spotsafe.goodput).

Per pool and in total the time is the node time paid (each node from its provisioning to its
release); per job it is the job's own time, from its first queueing to its end: its pods'
lifetimes and its waits for a node. A pod's lifetime splits by its trainer's ledger (pod start,
restore, steps, blocking and final saves, as it reported them last) and `other`, what the
ledger does not see (the process's exit, the moments between the last scrape and a kill).
Steps that the job's next pod computed again are lost work: the steps a pod reached beyond the
one its successor resumed from, at that pod's own time per step. Waiting for a node costs the
job time but no node time (the drill provisions a node when it places a pod); a node up with no
pod costs node time but no job's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spotsafe.goodput import (
    BLOCKING_SAVES,
    CAUSES,
    FINAL_SAVES,
    IDLE_NODES,
    LOST_WORK,
    POD_START,
    RESTORE,
    SCHEDULING,
)

from spotctl.drill.cluster import ON_DEMAND, SPOT
from spotctl.drill.harness import Outcome
from spotctl.drill.jobs import Job, Run

OTHER = "other"
ACCOUNTS = (*CAUSES, OTHER)
_LEDGER_CAUSES = (POD_START, RESTORE, BLOCKING_SAVES, FINAL_SAVES)


@dataclass
class Account:
    goodput_s: float = 0.0
    badput_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ACCOUNTS, 0.0))

    def add(self, other: Account) -> None:
        self.goodput_s += other.goodput_s
        for cause, seconds in other.badput_s.items():
            self.badput_s[cause] += seconds

    @property
    def total_s(self) -> float:
        return self.goodput_s + sum(self.badput_s.values())

    def to_json(self, time_key: str) -> dict:
        total = self.total_s
        return {
            "ratio": self.goodput_s / total if total > 0 else 0.0,
            "goodput_s": self.goodput_s,
            time_key: total,
            "badput_s": dict(self.badput_s),
        }


def _resumed_from(run: Run) -> int:
    return (run.result or {}).get("resumed_from", run.resumed_from) or 0


def lost_steps(job: Job) -> dict[int, int]:
    """Per pod (its index in job.runs): the steps it reached that the next pod to train
    computed again."""
    lost = {}
    trained = [i for i, r in enumerate(job.runs) if r.first_step_at is not None or r.result]
    for i, run in enumerate(job.runs):
        successor = next((k for k in trained if k > i), None)
        if successor is not None:
            lost[i] = max(0, run.reached - _resumed_from(job.runs[successor]))
    return lost


def pod_account(run: Run, lost: int) -> Account:
    life = run.ended_at - run.started_at
    ledger = run.ledger or {"goodput_s": 0.0, "badput_s": {}}
    seen = ledger["badput_s"]
    account = Account()
    if not seen.get(POD_START):  # the trainer never got as far as its runtime
        account.badput_s[POD_START] = life
        return account
    stepped = ledger["goodput_s"] + seen.get(LOST_WORK, 0.0)
    done = run.reached - _resumed_from(run)
    account.badput_s[LOST_WORK] = min(stepped, lost * stepped / done) if done > 0 else 0.0
    account.goodput_s = stepped - account.badput_s[LOST_WORK]
    for cause in _LEDGER_CAUSES:
        account.badput_s[cause] = seen.get(cause, 0.0)
    unseen = life - account.total_s
    if unseen < 0:  # the process's start comes from /proc in 10 ms ticks: rounding, not time
        account.badput_s[POD_START] += unseen
    else:
        account.badput_s[OTHER] = unseen
    return account


def summary(outcome: Outcome) -> dict:
    """Goodput and badput in total, per pool and per job; with the lost steps they count."""
    pools = {pool: Account() for pool in (SPOT, ON_DEMAND)}
    jobs = {}
    lost_total = 0
    for job in outcome.jobs:
        account = Account()
        account.badput_s[SCHEDULING] = sum(
            e.waited_s or 0.0 for e in outcome.events if e.kind == "placed" and e.job == job.name
        )
        lost = lost_steps(job)
        lost_total += sum(lost.values())
        for i, run in enumerate(job.runs):
            pod = pod_account(run, lost.get(i, 0))
            account.add(pod)
            pools[run.node.pool].add(pod)
        jobs[job.name] = account.to_json("run_s")
    total = Account()
    for pool, account in pools.items():
        nodes = [n for n in outcome.cluster.nodes if n.pool == pool]
        up = sum(n.up_seconds(outcome.ended_at) for n in nodes)
        account.badput_s[IDLE_NODES] = max(0.0, up - account.total_s)
        total.add(account)
    return {
        **total.to_json("paid_s"),
        "pools": {pool: account.to_json("paid_s") for pool, account in pools.items()},
        "jobs": jobs,
        "lost_steps": lost_total,
    }
