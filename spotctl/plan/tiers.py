"""The memory tier in a plan of several nodes: what a memory save costs, from stated inputs, and
the two tiers planned together against the durable tier alone (`model.two_tiers`).

A memory save (spotsafe.memory) holds each rank for one copy of its state into host memory,
then, beside training, writes that copy to the node's tmpfs and sends it over one TCP
connection per rank to the same local rank on the next node. The runtime keeps replicated (DDP)
states only, whole on every rank, so a rank's state is by default the whole state.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotctl.plan.model import MemoryTier, SpotJob, interval_s, two_tiers

HOST_COPY_GB_PER_S = 10.0
"""One rank's copy of its state into host memory (GPU to pinned host memory over its own PCIe
link, which PCIe 4.0 x16 peaks near 25 GB/s; the durable snapshot's figure), and again into the
tmpfs."""
SURVIVES = 0.9
"""The share of failures without a notice that leave each lost node's peer alive (assumed: the
Llama 3 report attributes most of its unexpected interruptions to one host's hardware, GPUs and
their memory; a zone, rack or switch lost takes both copies)."""
AWS_FLOW_GBPS = 5.0
"""EC2's limit on one TCP flow between instances outside a cluster placement group (EC2 User
Guide, "Amazon EC2 instance network bandwidth"); each local rank sends over its own flow."""
DEFAULT_PEER_GBPS = 10.0
"""A node's network without an instance type (`--class`) or `--peer-gbps`: g5's "up to 10"."""
SHELF_COPIES = 6
"""Copies of a rank's state in the tmpfs at the peak: its own two newest steps and its peer's
two, and one more of each while a new step is written before the oldest is dropped
(training-image/README.md, "The memory tier")."""
STAGING_COPIES = 1
"""The staging buffers each rank copies its state into, in the process's memory."""
MEMORY_COPIES = SHELF_COPIES + STAGING_COPIES


@dataclass(frozen=True)
class MemoryCosts:
    """The stated inputs of a memory save's cost on one node."""

    rank_gb: float
    """What one rank's snapshot holds."""
    ranks_per_node: int
    copy_gb_per_s: float
    peer_gbps: float
    """The node's network bandwidth."""
    flow_gbps: float | None
    """The cloud's limit on one TCP flow; None where it states none."""
    survives: float

    @property
    def send_gbps(self) -> float:
        """What the node's ranks get together, one flow each."""
        if self.flow_gbps is None:
            return self.peer_gbps
        return min(self.peer_gbps, self.ranks_per_node * self.flow_gbps)

    def tier(self) -> MemoryTier:
        """Blocked for the copy; held by the peer once the tmpfs copy and the send are done."""
        copy_s = self.rank_gb / self.copy_gb_per_s
        send_s = self.ranks_per_node * self.rank_gb * 8 / self.send_gbps
        return MemoryTier(copy_s, 2 * copy_s + send_s, self.survives)

    def host_memory_gb(self) -> float:
        """A node's host memory the tier holds at its peak, tmpfs and staging buffers."""
        return MEMORY_COPIES * self.ranks_per_node * self.rank_gb


def plan(job: SpotJob, costs: MemoryCosts) -> dict:
    """Each tier's interval, cost and what it survives, and a failure's loss and the badput with
    the durable tier alone against both (to first order, as `model.two_tiers` has them)."""
    memory = costs.tier()
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
