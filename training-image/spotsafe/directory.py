"""Checkpoint directories written by frameworks (HF Trainer, Lightning) as spotsafe state.

``DirectoryState(path)`` is Stateful: its state is every file under path, so a directory goes
through the same manifest, checksums, fencing, retention and resume as any other state.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from spotsafe.checkpointer import Checkpointer

CHECKPOINT_DIR = "checkpoint_dir"
"""The state entry the framework integrations store their checkpoint directory under."""


class DirectoryState:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def state_dict(self) -> dict[str, Any]:
        files = sorted(p for p in self.path.rglob("*") if p.is_file())
        return {p.relative_to(self.path).as_posix(): _as_tensor(p.read_bytes()) for p in files}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Write the saved files under path (creating it); files not in the checkpoint stay."""
        for relative, content in state_dict.items():
            target = self.path / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.numpy().tobytes())


def restore_directory(
    ckpt: Checkpointer, parent: Path, prefix: str
) -> tuple[int | None, str | None]:
    """Restore the newest valid checkpoint directory to parent/<prefix><step>: (step, path),
    or (None, None) on a fresh start."""
    incoming = parent / ".spotsafe-restoring"
    shutil.rmtree(incoming, ignore_errors=True)
    step = ckpt.restore({CHECKPOINT_DIR: DirectoryState(incoming)})
    if step is None:
        return None, None
    target = parent / f"{prefix}{step}"
    shutil.rmtree(target, ignore_errors=True)
    incoming.rename(target)
    return step, str(target)


def _as_tensor(data: bytes) -> torch.Tensor:
    if not data:  # frombuffer refuses an empty buffer
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)
