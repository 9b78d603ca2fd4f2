"""The memory tier in a plan of several nodes: the two tiers planned together against the durable
tier alone (`model.two_tiers`), from what a memory save costs (`costs.MemoryCosts`). A rank's
snapshot is the whole state where one GPU holds it (DDP), else its shard (FSDP):
`costs.rank_share`.
"""

from __future__ import annotations

from spotctl.plan.costs import MemoryCosts
from spotctl.plan.model import MemoryTier, SpotJob, interval_s, two_tiers

SURVIVES = 0.9
"""The share of failures without a notice that leave each lost node's peer alive (assumed: the
Llama 3 report attributes most of its unexpected interruptions to one host's hardware, GPUs and
their memory; a zone, rack or switch lost takes both copies)."""
DEFAULT_PEER_GBPS = 10.0
"""A node's network without an instance type (`--class`) or `--peer-gbps`: g5's "up to 10"."""


def plan(job: SpotJob, costs: MemoryCosts) -> dict:
    """Each tier's interval, cost and what it survives, and a failure's loss and the badput with
    the durable tier alone against both (to first order, as `model.two_tiers` has them)."""
    memory = MemoryTier(costs.blocked_s, costs.save_s, costs.survives)
    tiers = two_tiers(job, memory)

    def steps(seconds: float) -> int:
        return max(1, round(seconds / job.step_s))

    return {
        "applies": True,
        "memory_interval_s": tiers.memory_interval_s,
        "memory_interval_steps": steps(tiers.memory_interval_s),
        "durable_interval_s": tiers.durable_interval_s,
        "durable_interval_steps": steps(tiers.durable_interval_s),
        "durable_only_interval_s": interval_s(job),
        "memory_blocked_s": memory.blocked_s,
        "memory_save_s": memory.save_s,
        "durable_blocked_s": job.blocked_s,
        "durable_save_s": job.save_s,
        "memory_survives": f"a failure without a notice that leaves each lost node's peer "
        f"alive ({costs.survives:.0%} of them)",
        "durable_survives": "every interruption, both copies of a memory step lost included",
        "lost_per_failure_s": tiers.lost_per_failure_s,
        "durable_only_lost_per_failure_s": tiers.durable_only_lost_per_failure_s,
        "badput": tiers.badput,
        "durable_only_badput": tiers.durable_only_badput,
        "pays": tiers.badput < tiers.durable_only_badput,
        "host_memory_gb_per_node": costs.host_memory_gb(),
    }


def off(why: str) -> dict:
    return {"applies": False, "why": why}
