"""All ranks agree, at each step boundary, on whether to stop, checkpoint early, and by when.

One all_reduce(MAX) of three numbers per step: [any rank must stop, any rank saw a rebalance
recommendation, minus the earliest deadline]. Every rank calls it at the same step, so every rank
gets the same answer at the same step and they all stop at that step. Without an initialised
process group it is the local decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotsafe.termination import Notice


@dataclass(frozen=True)
class Agreement:
    stop: bool
    """A preemption is imminent on some rank: save a final checkpoint at this step and exit."""
    checkpoint_now: bool
    """Some rank got an early warning (rebalance): save now and keep training."""
    deadline: float | None
    """The earliest deadline, in epoch seconds, over all ranks' notices."""


def agree(preemption: Notice | None, rebalance: bool) -> Agreement:
    import torch
    import torch.distributed as dist

    deadline = preemption.deadline if preemption is not None else math.inf
    if dist.is_available() and dist.is_initialized():
        votes = torch.tensor(
            [float(preemption is not None), float(rebalance), -deadline], dtype=torch.float64
        )
        dist.all_reduce(votes, op=dist.ReduceOp.MAX)
        stop, rebalance, deadline = bool(votes[0]), bool(votes[1]), -float(votes[2])
    else:
        stop = preemption is not None
    return Agreement(stop, rebalance and not stop, None if math.isinf(deadline) else deadline)
