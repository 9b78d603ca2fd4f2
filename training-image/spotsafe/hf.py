"""Hugging Face Trainer: its checkpoint directories through spotsafe, and termination notices.

sync = SpotsafeCallback("s3://my-bucket/team-a/run-7")
trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[sync])
trainer.train(resume_from_checkpoint=sync.restore(args.output_dir))

Every ``checkpoint-<step>`` directory the Trainer writes is shipped through the checkpoint
protocol (manifest, checksums, fencing, retention); ``restore`` puts the newest valid one back.
On a termination notice the Trainer saves at the step reached and stops; that checkpoint is
made durable and the process exits 75. A restart whose checkpoint is already at ``max_steps``
trains nothing and ``trainer.train()`` returns, so the code after it (evaluation, export) runs
on the final weights. The Trainer alone would train one step more: its loop has no way out
before the first step's forward and backward, so the callback turns that step's optimizer and
scheduler steps into no-ops and, at its end, puts back the model's tensors, the RNGs and the
Trainer's state as they were restored, and stops the loop with nothing logged or saved.
Install with the ``hf`` extra; single-process training.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from spotsafe.checkpointer import Checkpointer
from spotsafe.directory import CHECKPOINT_DIR, DirectoryState, restore_directory
from spotsafe.preemption import EXIT_PREEMPTED, PreemptionGuard
from spotsafe.run import Preempted
from spotsafe.state import RNGState

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
        self._finished = False  # restored at max_steps: nothing to train
        self._as_restored: dict[str, Any] = {}  # a finished run's state, for after the step

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
            self._finished = True

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._finished or self._as_restored:
            return
        # The Trainer has restored everything by now, the RNGs last (before this callback).
        model, optimizer, scheduler = kwargs["model"], kwargs["optimizer"], kwargs["lr_scheduler"]
        self._as_restored = {
            "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "rng": RNGState().state_dict(),
            # Its callbacks' own states stay the live objects they are.
            "state": {
                k: copy.deepcopy(v) for k, v in vars(state).items() if k != "stateful_callbacks"
            },
            "steppers": [optimizer, scheduler],
        }
        for stepper in self._as_restored["steppers"]:
            stepper.step = _no_step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._finished:
            self._put_back(state, kwargs["model"])
            _nothing_more(control)
            return
        decision = self.guard.check()
        if decision.checkpoint_now or decision.stop:
            control.should_save = True
        if decision.stop:
            control.should_training_stop = True
            self._stopping = True

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._finished:
            _nothing_more(control)

    def _put_back(self, state: Any, model: Any) -> None:
        """The finished run's state as it was restored, before the step the loop forced."""
        saved, self._as_restored = self._as_restored, {}
        for stepper in saved["steppers"]:
            del stepper.step
        model.load_state_dict(saved["model"])
        model.zero_grad(set_to_none=True)
        RNGState().load_state_dict(saved["rng"])
        vars(state).update(saved["state"])

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


def _no_step(*args: Any, **kwargs: Any) -> None:
    """An optimizer's or scheduler's step on a finished run: there is nothing to train."""


def _nothing_more(control: Any) -> None:
    control.should_training_stop = True
    control.should_save = control.should_log = control.should_evaluate = False
