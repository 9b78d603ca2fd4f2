"""Lightning: checkpoints through spotsafe, and termination notices.

sync = SpotsafeCheckpoint("s3://my-bucket/team-a/run-7", "/tmp/ckpt", every_steps=100)
trainer = lightning.Trainer(max_steps=1000, callbacks=[sync])
trainer.fit(model, datamodule, ckpt_path=sync.restore())

Every `every_steps` steps the callback writes a Lightning checkpoint into a directory of its own
and ships it through the checkpoint protocol (manifest, checksums, fencing, retention);
``restore`` puts the newest valid one back and names its file. The checkpoint also carries this
process's RNGs, which Lightning does not save, and the state of the train loader's shuffling
generator (see spotsafe.data.LoaderGenerator). On a termination notice the step reached is
saved, made durable, and the process exits 75. Install with the ``lightning`` extra;
single-process training.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback

from spotsafe.checkpointer import Checkpointer
from spotsafe.data import LoaderGenerator
from spotsafe.directory import CHECKPOINT_DIR, DirectoryState, restore_directory
from spotsafe.preemption import EXIT_PREEMPTED, PreemptionGuard
from spotsafe.run import Preempted
from spotsafe.state import RNGState

CHECKPOINT_FILE = "checkpoint.ckpt"
CHECKPOINT_KEY = "spotsafe"
"""What the callback adds to Lightning's checkpoint: RNGs and the loader's generator."""


class SpotsafeCheckpoint(Callback):
    """Saves every `every_steps` steps and on notices; options are CheckpointConfig's."""

    def __init__(self, uri: str, dirpath: str | Path, **options: Any) -> None:
        self.ckpt = Checkpointer(uri, **options)
        self.dirpath = Path(dirpath)
        self.guard = PreemptionGuard.from_env()
        self.generator = LoaderGenerator()
        self.resumed_from: int | None = None
        self.report: dict[str, Any] = {}
        """After a notice: how the final save went (as Preempted.report)."""

    def restore(self) -> str | None:
        """The newest valid checkpoint's file, for ``trainer.fit(..., ckpt_path=...)``; None on
        a fresh start."""
        self.resumed_from, path = restore_directory(self.ckpt, self.dirpath, "step-")
        return None if path is None else str(Path(path) / CHECKPOINT_FILE)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = {
            "rng": RNGState().state_dict(),
            "loader_generator": self.generator.state_dict(trainer.train_dataloader),
        }

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        saved = checkpoint[CHECKPOINT_KEY]
        RNGState().load_state_dict(saved["rng"])
        self.generator.load_state_dict(saved["loader_generator"])

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.guard.__enter__()
        self.guard.account_lost_steps(self.ckpt, self.resumed_from)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        # Resumed from an epoch's last batch: the loader has applied its saved state and is
        # about to draw the next epoch's permutation, which must come from the saved generator.
        self.generator.started(trainer.train_dataloader)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        self.generator.started(trainer.train_dataloader)  # the resumed epoch has begun

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        step = trainer.global_step
        decision = self.guard.check()
        if not (decision.stop or decision.checkpoint_now or self.ckpt.due(step)):
            return
        path = self.dirpath / f"step-{step}"
        trainer.save_checkpoint(path / CHECKPOINT_FILE)
        written = {CHECKPOINT_DIR: DirectoryState(path)}
        if decision.stop:
            self.report = self.guard.final_save(self.ckpt, step, written)
            self.guard.close(exit_code=EXIT_PREEMPTED)
            raise Preempted(self.report)
        if decision.checkpoint_now:
            self.ckpt.save(step, written)
        else:
            self.ckpt.maybe_save(step, written)
        shutil.rmtree(path)  # its files are in the snapshot now

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        step = trainer.global_step
        if step and self.ckpt.last_saved_step != step:
            path = self.dirpath / f"step-{step}"
            trainer.save_checkpoint(path / CHECKPOINT_FILE)
            self.ckpt.save(step, {CHECKPOINT_DIR: DirectoryState(path)})
            shutil.rmtree(path)
        try:
            self.ckpt.close()
        except BaseException:
            self.guard.close()
            raise
        self.guard.close(exit_code=0)
