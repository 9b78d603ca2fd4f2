"""The planner's model: one training job on spot nodes, in closed form.

Interruptions arrive as a Poisson process over the job's paid time: spot notices at one rate,
failures without a usable notice (hardware, a lost notice) at another. The job trains; every
`interval` seconds of training it blocks for the snapshot of an async save, whose upload makes it
durable `save_s` after it started. A notice stops training: when the final save fits the notice
it keeps everything, else the node goes with the notice and the work since the last durable
checkpoint is lost, as on a failure. After either the job restarts on a new node, which may be
interrupted too, and the interval counts from the checkpoint it resumed from.

Every interruption starts the same schedule afresh, so the process renews there and its
long-run goodput is E[work kept per cycle] / E[paid time per cycle] (the renewal-reward
theorem), computed exactly below. The interval comes from Young (1974) and Daly (2006) on the
blocking part of a save, which is what training pays per checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from spotsafe.goodput import BLOCKING_SAVES, FINAL_SAVES, LOST_WORK

from spotctl.plan.costs import Costs, MemoryCosts

HOUR_S = 3600.0
RESTARTS = "restarts"
"""From an interruption until training again: the runtime's and the drill's scheduling, pod
start and restore (spotsafe.goodput.RESTARTS), in one."""
CAUSES = (BLOCKING_SAVES, LOST_WORK, FINAL_SAVES, RESTARTS)
"""Badput by cause, in the runtime's names (spotsafe.goodput)."""


@dataclass(frozen=True)
class SpotJob:
    """A job as the model sees it: seconds, and rates per second over the whole job."""

    work_s: float
    """Training time the job needs without interruptions."""
    notice_rate: float
    """Interruptions that come with a notice."""
    failure_rate: float
    """Interruptions without a usable notice."""
    notice_s: float
    """From the notice until the node is gone."""
    step_s: float
    """One training step: a notice takes effect at the next step boundary."""
    blocked_s: float
    """Training blocked per save (the snapshot of an async save)."""
    save_s: float
    """From a save's start until it is durable; the final save under a notice takes as long."""
    restart_s: float
    """From the end of an attempt until training again: a new node, pod start, restore."""
    restarts_interrupted: bool = True
    """Whether interruptions strike restarts too, as on a cloud; the drill strikes only pods
    that train."""

    @property
    def upload_s(self) -> float:
        """The part of a save that runs beside training."""
        return self.save_s - self.blocked_s

    @property
    def final_save_fits(self) -> bool:
        return self.step_s + self.save_s <= self.notice_s

    @property
    def loss_rate(self) -> float:
        """Interruptions that lose the work since the last durable checkpoint."""
        return self.failure_rate + (0.0 if self.final_save_fits else self.notice_rate)


@dataclass(frozen=True)
class Scenario:
    """The job the model plans, and what it rests on."""

    job: SpotJob
    price_ratio: float
    state_gb: float
    nodes: int
    sized: Callable[[float], Costs] | None
    """A node's costs for a shard of so many GB; None where they do not follow the size (a
    drill's measured save, or --save-s)."""
    assumptions: dict
    memory: MemoryCosts | str
    """The memory tier's costs on a node, or why it does not apply to the job."""


@dataclass(frozen=True)
class Expected:
    goodput: float
    """Work kept over paid time."""
    badput: dict[str, float]
    """Shares of paid time by cause; with goodput they sum to 1."""


def expected(job: SpotJob, interval_s: float) -> Expected:
    """Long-run goodput and badput when saving every `interval_s` seconds of training."""
    tau, c = interval_s, job.blocked_s
    rate = job.notice_rate + job.failure_rate
    if rate == 0:
        return Expected(tau / (tau + c), _shares(c, 0.0, 0.0, 0.0, tau + c))
    # Each term is rate × the expectation over a cycle, X ~ Exp(rate) its time in training.
    one_period = -math.expm1(-rate * (tau + c))
    blocked = math.exp(-rate * tau) * -math.expm1(-rate * c) / one_period  # time blocked by X
    durable = rate * tau * math.exp(-rate * (tau + job.save_s)) / one_period  # work durable at X
    work = 1.0 - blocked  # work done by X
    if job.final_save_fits:
        kept = work - job.failure_rate / rate * (work - durable)
        notice = job.notice_rate * job.save_s
    else:
        kept = durable
        notice = job.notice_rate * job.notice_s
    # A restart starts over when interrupted; past e^700 the goodput is 0 in doubles anyway.
    restarts = (
        math.expm1(min(rate * job.restart_s, 700.0))
        if job.restarts_interrupted
        else rate * job.restart_s
    )
    cycle = 1.0 + notice + restarts
    return Expected(kept / cycle, _shares(blocked, work - kept, notice, restarts, cycle))


def _shares(blocked: float, lost: float, notice: float, restarts: float, total: float) -> dict:
    return dict(zip(CAUSES, (v / total for v in (blocked, lost, notice, restarts)), strict=True))


def young_daly_s(blocked_s: float, loss_rate: float) -> float:
    """Daly's (2006) higher-order optimum for a checkpoint costing `blocked_s` against failures
    at `loss_rate`; its first term is Young's (1974) sqrt(2 δ M)."""
    if loss_rate == 0:
        return math.inf
    mtbf = 1.0 / loss_rate
    if blocked_s >= 2 * mtbf:
        return mtbf
    r = blocked_s / (2 * mtbf)
    return math.sqrt(2 * blocked_s * mtbf) * (1 + math.sqrt(r) / 3 + r / 9) - blocked_s


def interval_s(job: SpotJob) -> float:
    """Young/Daly, no shorter than the upload (a save must be durable before the next one
    starts, or training waits for it) and no longer than the job."""
    return min(max(young_daly_s(job.blocked_s, job.loss_rate), job.upload_s), job.work_s)


def planned_goodput(job: SpotJob) -> float:
    return expected(job, interval_s(job)).goodput


def on_demand(job: SpotJob) -> SpotJob:
    """The same job on on-demand nodes: no spot notices, the same failures."""
    return replace(job, notice_rate=0.0)


def cost_ratio(job: SpotJob, price_ratio: float) -> float:
    """Cost on spot over cost on on-demand, each arm at its own planned interval."""
    goodput = planned_goodput(job)
    return price_ratio * planned_goodput(on_demand(job)) / goodput if goodput else math.inf


def breakeven_notice_rate(job: SpotJob, price_ratio: float) -> float:
    """The notice rate (per second) at which spot costs as much as on-demand: 0 when spot is
    never cheaper, infinite when it is free. Cost grows with the rate, so a bisection (in log
    space) finds it."""
    if price_ratio >= 1:
        return 0.0
    if price_ratio == 0:
        return math.inf

    def cheaper(rate: float) -> bool:
        return cost_ratio(replace(job, notice_rate=rate), price_ratio) < 1

    low, high = 0.0, 1.0 / HOUR_S
    while cheaper(high):
        low, high = high, high * 2
    for _ in range(60):
        middle = math.sqrt(low * high) if low > 0 else high / 2
        low, high = (middle, high) if cheaper(middle) else (low, middle)
    return high


@dataclass(frozen=True)
class MemoryTier:
    """Checkpoints in peers' host memory between durable saves (spotsafe.memory)."""

    blocked_s: float
    """Training blocked per memory save: the snapshot copy."""
    save_s: float
    """From a memory save's start until the peer holds it."""
    survives: float
    """The share of failures without a notice it survives: those that leave every rank's
    snapshot alive somewhere (a node lost, its peer alive). The rest, both copies lost at once
    (a zone, a rack), fall back to the durable tier."""


@dataclass(frozen=True)
class Tiers:
    """The two tiers' intervals and what a failure without a notice loses, against the
    durable tier alone."""

    memory_interval_s: float
    durable_interval_s: float
    lost_per_failure_s: float
    durable_only_lost_per_failure_s: float
    badput: float
    """Share of training time blocked by saves or lost to interruptions, to first order."""
    durable_only_badput: float


def lost_per_loss_s(interval_s: float, blocked_s: float, save_s: float) -> float:
    """Training lost by a loss at a uniform moment of one tier's period (interval_s of
    training, then blocked_s): the work since the newest save it holds, which is the one before
    when the loss lands within save_s of a save's start."""
    period = interval_s + blocked_s
    return interval_s * (interval_s / 2 + min(save_s, period)) / period


def two_tiers(job: SpotJob, memory: MemoryTier) -> Tiers:
    """Each tier's Young/Daly interval against the losses it alone must cover: the memory tier
    the failures it survives, the durable tier every other loss (the notices whose final save
    does not fit, and the failures that take both copies)."""
    survived = memory.survives * job.failure_rate
    memory_interval = min(
        max(young_daly_s(memory.blocked_s, survived), memory.save_s - memory.blocked_s),
        job.work_s,
    )
    durable_interval = interval_s(replace(job, failure_rate=job.failure_rate - survived))
    memory_lost = lost_per_loss_s(memory_interval, memory.blocked_s, memory.save_s)
    durable_lost = lost_per_loss_s(durable_interval, job.blocked_s, job.save_s)
    alone_lost = lost_per_loss_s(interval_s(job), job.blocked_s, job.save_s)
    badput = _blocked(durable_interval, job.blocked_s) + (job.loss_rate - survived) * durable_lost
    if survived:  # a tier that survives nothing never saves
        badput += _blocked(memory_interval, memory.blocked_s) + survived * memory_lost
    return Tiers(
        memory_interval,
        durable_interval,
        memory.survives * memory_lost + (1 - memory.survives) * durable_lost,
        alone_lost,
        badput,
        _blocked(interval_s(job), job.blocked_s) + job.loss_rate * alone_lost,
    )


def _blocked(interval: float, blocked_s: float) -> float:
    return blocked_s / (interval + blocked_s)
