"""What a save, a restore and a restart cost a node: from the state size at assumed speeds, from
the checkpoint benchmark's figures (`python -m spotsafe.bench --json`), or from a drill report
(`spotctl drill --json`); and what a save of the memory tier costs (`MemoryCosts`).

A memory save (spotsafe.memory) holds each rank for one copy of its state into host memory,
then, beside training, writes that copy to the node's tmpfs and sends it over one TCP connection
per rank to the same local rank on the next node."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

# Per node. Measure yours with the benchmark and pass it with --from-bench.
STAGE_GB_PER_S = 10.0
"""Snapshot into pinned host memory, the blocking part of an async save (PCIe 4.0 x16 peaks
near 25 GB/s)."""
UPLOAD_GB_PER_S = 1.0
"""Multipart upload to S3 or GCS from one node (8 Gbit/s)."""
DOWNLOAD_GB_PER_S = 2.0
"""Ranged parallel download from S3 or GCS to one node (16 Gbit/s)."""
GB = 1e9
GB_PER_GIB = 2**30 / GB

# A node: the memory tier's save.
HOST_COPY_GB_PER_S = STAGE_GB_PER_S
"""A node's copy of its ranks' states into host memory, planned as the durable snapshot is (the
runtime stages both the same way: spotsafe.state.stage), and again into the tmpfs."""
AWS_FLOW_GBPS = 5.0
"""EC2's limit on one TCP flow between instances outside a cluster placement group (EC2 User
Guide, "Amazon EC2 instance network bandwidth"); each local rank sends over its own flow."""
SHELF_COPIES = 6
"""Copies of a rank's state in the tmpfs at the peak: its own two newest steps and its peer's
two, and one more of each while a new step is written before the oldest is dropped
(training-image/README.md, "The memory tier")."""
STAGING_COPIES = 1
"""The staging buffers each rank copies its state into, in the process's memory."""
MEMORY_COPIES = SHELF_COPIES + STAGING_COPIES


def rank_share(state: float, gpu_memory: float, ranks: int) -> tuple[float, str]:
    """What one rank's memory snapshot holds of a run's `state` over `ranks` GPUs of
    `gpu_memory` each (same unit), and why: the whole state where one GPU holds it (replicated,
    as DDP keeps it), else the rank's shard (sharded, as FSDP keeps it: the tier keeps each
    rank's local shards)."""
    if state <= gpu_memory:
        return state, "the whole state: it fits one GPU, replicated on every rank (DDP)"
    return state / ranks, f"its shard: the state does not fit one GPU, sharded over {ranks} (FSDP)"


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
    """The share of failures without a notice it survives."""

    @property
    def send_gbps(self) -> float:
        """What the node's ranks get together, one flow each."""
        if self.flow_gbps is None:
            return self.peer_gbps
        return min(self.peer_gbps, self.ranks_per_node * self.flow_gbps)

    @property
    def blocked_s(self) -> float:
        """Training held for the node's ranks' copies into their staging buffers: for a sharded
        state, the durable snapshot's own blocking."""
        return self.ranks_per_node * self.rank_gb / self.copy_gb_per_s

    @property
    def save_s(self) -> float:
        """Until the peer holds it: the copy, another into the tmpfs, and the node's send."""
        return 2 * self.blocked_s + self.ranks_per_node * self.rank_gb * 8 / self.send_gbps

    def host_memory_gb(self) -> float:
        """A node's host memory the tier holds at its peak, tmpfs and staging buffers."""
        return MEMORY_COPIES * self.ranks_per_node * self.rank_gb


class CostError(ValueError):
    """A cost source that cannot be read; the message names the file or field."""


@dataclass(frozen=True)
class Costs:
    blocked_s: float
    save_s: float
    restore_s: float | None
    """None where a measured restart includes it."""
    restart_s: float


def from_size(shard_gb: float, node_start_s: float) -> Costs:
    """A node's costs for its shard; its restart is a new node's start (node_start.py) and the
    restore."""
    blocked = shard_gb / STAGE_GB_PER_S
    restore = shard_gb / DOWNLOAD_GB_PER_S
    return Costs(blocked, blocked + shard_gb / UPLOAD_GB_PER_S, restore, node_start_s + restore)


SIZE_ASSUMPTIONS = {
    "stage_gb_per_s": STAGE_GB_PER_S,
    "upload_gb_per_s": UPLOAD_GB_PER_S,
    "download_gb_per_s": DOWNLOAD_GB_PER_S,
}


@dataclass(frozen=True)
class Measured:
    """Costs read from a file; `at(shard_gb, node_start_s)` gives them for a node's shard of that
    size."""

    kind: str
    """bench or drill."""
    points: tuple[tuple[float, float, float, float], ...] = ()
    """bench: (GB, blocked_s, save_s, restore_s), by size."""
    state_gb: float | None = None
    """bench: the size of its top-level figures."""
    drill: Costs | None = None
    """drill: the median final save and restart it measured."""

    def at(self, shard_gb: float, node_start_s: float) -> Costs:
        if self.drill is not None:
            blocked = shard_gb / STAGE_GB_PER_S
            return Costs(blocked, max(self.drill.save_s, blocked), None, self.drill.restart_s)
        blocked, save, restore = (
            _interpolate([(p[0], p[column]) for p in self.points], shard_gb) for column in (1, 2, 3)
        )
        return Costs(blocked, save, restore, node_start_s + restore)

    def assumptions(self) -> dict:
        if self.kind == "drill":
            return {
                "costs_from": "drill report: the median final save (notice to durable) and "
                "restart (durable to the first step after resume) of its noticed preemptions; "
                "the blocking part from the state size",
                "stage_gb_per_s": STAGE_GB_PER_S,
            }
        return {
            "costs_from": "benchmark: linear in state size between its measured sizes, "
            "proportional to the nearest one outside them",
            "measured_state_gb": [p[0] for p in self.points],
        }


def _interpolate(points: list[tuple[float, float]], gb: float) -> float:
    (low_gb, low), (high_gb, high) = points[0], points[-1]
    if gb <= low_gb:
        return low * gb / low_gb
    if gb >= high_gb:
        return high * gb / high_gb
    (gb0, v0), (gb1, v1) = next(
        (a, b) for a, b in zip(points, points[1:], strict=False) if b[0] > gb
    )
    return v0 + (gb - gb0) / (gb1 - gb0) * (v1 - v0)


def read(path: Path) -> Measured:
    """A benchmark's JSON line (alone, or last in its full output) or a drill report."""
    try:
        text = path.read_text()
    except OSError as e:
        raise CostError(f"--from-bench {path}: {e.strerror}") from None
    doc = _json_object(text)
    if doc is None:
        raise CostError(f"--from-bench {path}: no JSON object in it")
    if "interruptions" in doc:
        return _from_drill(doc, path)
    if "save_s" in doc:
        return _from_bench(doc, path)
    raise CostError(f"--from-bench {path}: neither a benchmark's JSON nor a drill report")


def _json_object(text: str) -> dict | None:
    for candidate in (text, *reversed(text.strip().splitlines())):
        try:
            doc = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def _number(value: object, path: Path, where: str, positive: bool = True) -> float:
    """A finite number (JSON's NaN and Infinity are not), positive or at least zero."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        kind = "a positive number" if positive else "a number, zero or more"
        raise CostError(f"--from-bench {path}: {where} must be {kind}, not {json.dumps(value)}")
    return float(value)


def _from_bench(doc: dict, path: Path) -> Measured:
    sweep = doc.get("sweep", [])
    if not isinstance(sweep, list) or not all(isinstance(row, dict) for row in sweep):
        raise CostError(f"--from-bench {path}: sweep must be a list of objects")
    rows = [("", doc)] + [(f"sweep[{i}].", row) for i, row in enumerate(sweep)]
    points: dict[float, tuple[float, float, float]] = {}
    for where, row in rows:
        values = {
            key: _number(row.get(key), path, f"{where}{key}")
            for key in ("state_bytes", "blocked_s", "save_s", "restore_s")
        }
        if values["save_s"] < values["blocked_s"]:
            raise CostError(f"--from-bench {path}: {where}save_s is less than its blocked_s")
        gb = values["state_bytes"] / GB
        points[gb] = (values["blocked_s"], values["save_s"], values["restore_s"])
    ordered = tuple((gb, *costs) for gb, costs in sorted(points.items()))
    return Measured("bench", ordered, state_gb=doc["state_bytes"] / GB)


def _from_drill(doc: dict, path: Path) -> Measured:
    interruptions = doc["interruptions"]
    if not isinstance(interruptions, list) or not all(isinstance(i, dict) for i in interruptions):
        raise CostError(f"--from-bench {path}: interruptions must be a list of objects")
    saves, restarts = [], []
    for n, i in enumerate(interruptions):
        durable, resumed = i.get("notice_to_durable_s"), i.get("notice_to_resume_s")
        if i.get("kind") != "notice" or durable is None or resumed is None:
            continue
        where = f"interruptions[{n}]."
        durable = _number(durable, path, where + "notice_to_durable_s")
        resumed = _number(resumed, path, where + "notice_to_resume_s")
        if resumed < durable:
            raise CostError(
                f"--from-bench {path}: {where}notice_to_resume_s ({resumed:g} s) precedes its "
                f"notice_to_durable_s ({durable:g} s): a job resumes from a durable checkpoint"
            )
        saves.append(durable)
        restarts.append(resumed - durable)
    if not saves:
        raise CostError(
            f"--from-bench {path}: the drill report has no noticed preemption with a durable "
            "final save and a resume"
        )
    return Measured(
        "drill",
        drill=Costs(0.0, statistics.median(saves), None, statistics.median(restarts)),
    )
