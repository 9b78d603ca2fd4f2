"""Hugging Face Trainer: its checkpoint directories through spotsafe, and termination notices.

sync = SpotsafeCallback("s3://my-bucket/team-a/run-7")
trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[sync])
trainer.train(resume_from_checkpoint=sync.restore(args.output_dir))

Every ``checkpoint-<step>`` directory the Trainer writes is shipped through the checkpoint
protocol (manifest, checksums, fencing, retention); ``restore`` puts the newest valid one back.
On a termination notice the Trainer saves at the step reached and stops; that checkpoint is
made durable and the process exits 75. A restart whose checkpoint is already at ``max_steps``
exits 0 without training (the Trainer alone would train one step more). Install with the
``hf`` extra; single-process training.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from spotsafe.checkpointer import Checkpointer
from spotsafe.directory import CHECKPOINT_DIR, DirectoryState, restore_directory
from spotsafe.preemption import EXIT_PREEMPTED, PreemptionGuard
from spotsafe.run import Preempted

log = logging.getLogger("spotsafe")


class SpotsafeCallback(TrainerCallback):
    """Ships the Trainer's checkpoints and handles notices; options are CheckpointConfig's."""

    def __init__(self, uri: str, **options: Any) -> None:
        self.ckpt = Checkpointer(uri, **options)
        self.guard = PreemptionGuard.from_env()
        self.resumed_from: int | None = None
        self.report: dict[str, Any] = {}
        """After a notice: how the final save went (as Preempted.report)."""
        self._stopping = False

    def restore(self, output_dir: str | Path) -> str | None:
        """Put the newest valid checkpoint at output_dir/checkpoint-<step>; its path for
        ``trainer.train(resume_from_checkpoint=...)``, or None on a fresh start."""
        self.resumed_from, path = restore_directory(self.ckpt, Path(output_dir), "checkpoint-")
        return path

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.guard.__enter__()
        self.guard.account_lost_steps(self.ckpt, self.resumed_from)
        if self.resumed_from is not None and state.global_step >= state.max_steps:
            log.warning(
                "step %d is the run's last and its checkpoint is durable: nothing to train",
                state.global_step,
            )
            self._leave(0)
            raise SystemExit(0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        decision = self.guard.check()
        if decision.checkpoint_now or decision.stop:
            control.should_save = True
        if decision.stop:
            control.should_training_stop = True
            self._stopping = True

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        written = {CHECKPOINT_DIR: DirectoryState(path)}
        if not self._stopping:
            self.ckpt.save(state.global_step, written)
            return
        self.report = self.guard.final_save(self.ckpt, state.global_step, written)
        self.guard.close(exit_code=EXIT_PREEMPTED)
        raise Preempted(self.report)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._leave(0)

    def _leave(self, code: int) -> None:
        try:
            self.ckpt.close()
        except BaseException:
            self.guard.close()
            raise
        self.guard.close(exit_code=code)
