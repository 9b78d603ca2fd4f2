"""Checkpointer configuration: one dataclass, one docstring per field."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from spotsafe.errors import ConfigError


@dataclass(frozen=True)
class CheckpointConfig:
    every_steps: int | None = None
    """maybe_save() saves when the step is a multiple of this. None: no step cadence."""

    every_seconds: float | None = None
    """maybe_save() also saves when this long has passed since the last save started."""

    keep_last: int = 3
    """Retention keeps the newest keep_last checkpoints whatever their age (at least 2, so a
    corrupt newest one always has a predecessor)."""

    milestone_every: int = 0
    """Checkpoints at multiples of this step are milestones, kept beyond keep_last. 0: none."""

    max_age_s: float | None = None
    """Milestones older than this are deleted too. None: milestones are kept forever."""

    read_only: bool = False
    """Only restore: claim no attempt id, so a reader (an evaluation job, a tool) never fences
    the run's writer. save() then raises."""

    async_save: bool = True
    """Upload in the background; training is blocked only for the in-memory snapshot."""

    max_in_flight: int = 1
    """Background saves that may be pending at once. save() waits for a slot; maybe_save()
    skips a due save instead, so training goes on while storage is slow or down."""

    save_niceness: int = 0
    """Added to the nice value of the background save threads, so that on a CPU-bound node
    serialising, hashing and uploading yield the CPU to the training loop. Saves then take
    longer, the final one after a termination notice included, and an unprivileged process
    cannot undo it; so 0, the training loop's own priority, by default."""

    max_attempts: int = 5
    """Attempts per storage request (exponential backoff with jitter between them)."""

    connect_timeout_s: float = 5.0
    """Seconds to wait for the storage endpoint to accept a connection."""

    memory_every_steps: int | None = field(
        default_factory=lambda: _env_steps("SPOTSAFE_MEMORY_EVERY_STEPS")
    )
    """Every this many steps, each rank's snapshot also goes to host memory and to a peer on
    another node (spotsafe.memory), a cache between durable saves that a restore uses when it
    is newer. None: off. Default: SPOTSAFE_MEMORY_EVERY_STEPS (unset: off)."""

    memory_dir: str = field(
        default_factory=lambda: os.environ.get("SPOTSAFE_MEMORY_DIR") or "/dev/shm/spotsafe"
    )
    """Where a node keeps the memory tier's snapshots: a tmpfs, so they outlive a restarted
    worker but never the node. Default: SPOTSAFE_MEMORY_DIR, else /dev/shm/spotsafe."""

    def __post_init__(self) -> None:
        checks = {
            "every_steps": self.every_steps is None or self.every_steps >= 1,
            "every_seconds": self.every_seconds is None or self.every_seconds > 0,
            "keep_last": self.keep_last >= 2,
            "milestone_every": self.milestone_every >= 0,
            "max_age_s": self.max_age_s is None or self.max_age_s > 0,
            "max_in_flight": self.max_in_flight >= 1,
            "save_niceness": 0 <= self.save_niceness <= 19,
            "max_attempts": self.max_attempts >= 1,
            "connect_timeout_s": self.connect_timeout_s > 0,
            "memory_every_steps": self.memory_every_steps is None or self.memory_every_steps >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise ConfigError(f"CheckpointConfig.{name}={getattr(self, name)!r} is invalid")

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


def _env_steps(name: str) -> int | None:
    raw = os.environ.get(name, "")
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{name}={raw!r} must be a whole number of steps, at least 1")
    return int(raw)
