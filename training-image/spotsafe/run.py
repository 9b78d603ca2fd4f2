"""A training run around a plain loop: resume, periodic saves, termination notices, the end.

with spotsafe.Run("s3://bucket/team/run-7", state, loader, every_steps=100) as run:
    for x, y in run.batches(epochs=10):
        train_step(x, y)

Entering restores the newest valid checkpoint (state, epoch, the loader mid-epoch, this
process's RNGs). Each time the loop asks for the next batch, the step just done is counted and
saved when due; after a termination notice that step is saved, made durable, and the run raises
``Preempted``, which exits 75 ("preempted, resume me"). Leaving the block at the end saves the
last step unless it is saved already and waits until it is durable. Nothing is saved twice.
Throughout, the run's time is accounted as goodput and badput by cause (``Run.ledger``, see
``spotsafe.goodput``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from spotsafe import goodput, launcher, metrics, worker_signals
from spotsafe.checkpointer import Checkpointer
from spotsafe.data import LoaderGenerator, LoaderPosition, unkept_randomness
from spotsafe.errors import ConfigError, SpotsafeError, StateMismatchError
from spotsafe.preemption import EXIT_PREEMPTED, PreemptionGuard
from spotsafe.state import RNGState, Stateful

log = logging.getLogger("spotsafe")

RUN_KEY = "spotsafe"
"""The run's own entry in the checkpointed state: epoch, RNGs, data loader."""

T = TypeVar("T")


class Preempted(SystemExit):
    """Raised at the step boundary after a termination notice, once the final save is durable
    (or has failed, its loss counted). Its exit code is 75; ``report`` says how the save went."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__(EXIT_PREEMPTED)
        self.report = report


class _Progress:
    """The run's entry in the checkpoint: epoch, this process's RNGs and the data loader."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.generator = LoaderGenerator()
        self.position = LoaderPosition()
        self._rng: dict[str, Any] | None = None  # set again once the loader has started

    def state_dict(self) -> dict[str, Any]:
        # The generators and the loader are this process's own: kept per rank, so that under
        # several ranks each resumes its own streams (one shared value would be rank 0's).
        own: dict[str, Any] = {"rng": RNGState().state_dict()}
        loader = self.run.loader
        if loader is not None:
            own["loader"] = self.position.state_dict(loader)
            own["loader_generator"] = self.generator.state_dict(loader)
        return {"epoch": self.run.epoch, f"rank{self.run.ckpt.rank}": own}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # A rank the saving world did not have (it was smaller) resumes rank 0's.
        own = state_dict.get(f"rank{self.run.ckpt.rank}") or state_dict["rank0"]
        loader = self.run.loader
        if (loader is None) != ("loader" not in own):
            has = "has" if "loader" in own else "has no"
            given = "is given" if loader is not None else "is not"
            raise StateMismatchError(
                f"the checkpoint {has} data-loader state but a loader {given} to the Run; "
                "resume with the same Run(uri, state, loader) the run was saved with"
            )
        self.run.epoch = int(state_dict["epoch"])
        RNGState().load_state_dict(own["rng"])
        if loader is not None:
            self.position.load_state_dict(loader, own["loader"])
            self.generator.load_state_dict(own["loader_generator"])
            self._rng = own["rng"]

    def epoch(self) -> Iterator[Any]:
        """The loader's batches of one epoch (the rest of the saved one, once resumed).
        Creating its iterator draws from the generators (a loader without generator= draws its
        base seed from the global one), from their states at the epoch's start; they are set
        back to the saved states once it exists."""
        loader = self.run.loader
        self.generator.starting(loader)
        with worker_signals.held(loader):  # the workers it starts are shielded from birth
            batches = self.position.counted(iter(loader))
        self.generator.started(loader)
        if self._rng is not None:
            RNGState().load_state_dict(self._rng)
            self._rng = None
        return batches


class Run:
    """One attempt of a training run; see the module docstring.

    checkpoint: a checkpoint URI (options are CheckpointConfig fields) or a Checkpointer.
    state: Stateful objects by name (model, optimizer, scheduler, ...), as for Checkpointer.
    loader: a StatefulDataLoader for ``batches()``; its position is saved with every step.
    """

    def __init__(
        self,
        checkpoint: str | Checkpointer,
        state: Mapping[str, Any],
        loader: Any = None,
        **options: Any,
    ) -> None:
        if RUN_KEY in state:
            raise ConfigError(f"state[{RUN_KEY!r}] is the run's own entry; name yours otherwise")
        self.loader = _checked(loader)
        worker_signals.shield(self.loader)
        self.guard = PreemptionGuard.from_env()
        launcher.warn_if_exit_code_lost()
        if isinstance(checkpoint, Checkpointer):
            if options:
                raise ConfigError("pass checkpoint options to the Checkpointer, not to the Run")
            self.ckpt = checkpoint
        else:
            self.ckpt = Checkpointer(checkpoint, **options)
        self._progress = _Progress(self)
        self.state = {**state, RUN_KEY: self._progress}
        self.step = 0
        """Steps completed, counting those of earlier attempts."""
        self.epoch = 0
        """The epoch in progress (batches() counts them)."""
        self.resumed_from: int | None = None
        self.report: dict[str, Any] = {}
        """After a notice: how the final save went (Preempted.report)."""
        self.ledger = goodput.Ledger()
        """This attempt's goodput and badput seconds."""
        self._progress_every_s = goodput.progress_every_s()
        self._recorder: goodput.ProgressRecorder | None = None

    def __enter__(self) -> Run:
        self.ledger.start()
        self.guard.__enter__()
        try:
            self.resumed_from = self.ckpt.restore(self.state)
            lost = self.guard.account_lost_steps(self.ckpt, self.resumed_from)
            self._account_repeats(lost)
        except BaseException:
            self.guard.close()
            self.ckpt.close()
            raise
        self.step = self.resumed_from or 0
        metrics.resumed_from_step.set(-1 if self.resumed_from is None else self.resumed_from)
        self.ledger.charge(goodput.RESTORE)
        return self

    def _account_repeats(self, lost_at_stop: int | None) -> None:
        """How far the earlier attempts got (steps up to there are lost work when trained
        again), and, on rank 0, record how far the run gets for the next attempt."""
        attempt = self.ckpt.attempt
        if attempt is None:  # a reader: it trains nothing of the run's own
            return
        resumed = self.resumed_from or 0
        reached = goodput.reached_before(self.ckpt.store, attempt)
        self.ledger.redo_until = max(reached, resumed + (lost_at_stop or 0))
        if self.ckpt.rank == 0:
            self._recorder = goodput.ProgressRecorder(
                self.ckpt.store,
                attempt,
                lambda: max(self.step, self.ledger.redo_until),
                self._progress_every_s,
                recorded=max(reached, resumed),
            )

    def __exit__(self, kind: type | None, error: BaseException | None, tb: object) -> None:
        code = None
        try:
            if isinstance(error, Preempted):
                code = EXIT_PREEMPTED  # the final save has been made durable, or reported lost
            elif error is None:
                if self.step and self.ckpt.last_saved_step != self.step:
                    self.ckpt.save(self.step, self.state)
                self.ckpt.close()
                code = 0
            else:
                self._close_behind(error)
        finally:
            if self._recorder is not None:
                # After a notice the final save holds the step reached, and the time left is
                # the notice's: no further write.
                self._recorder.close(final=code != EXIT_PREEMPTED)
            self.guard.close(exit_code=code)
            # The wrap-up is part of the run's end: the final save's after a notice, else the
            # last save's (or the wait for the saves in flight).
            self.ledger.charge(
                goodput.FINAL_SAVES if code == EXIT_PREEMPTED else goodput.BLOCKING_SAVES
            )

    def steps(self, total: int) -> Iterator[int]:
        """Step numbers after the restored one, up to total. Each step's work runs between one
        number and the next; leaving the loop with break counts the step in progress as done."""
        while self.step < total:
            yield from self._one_step(self.step + 1)

    def batches(self, epochs: int | None = None, steps: int | None = None) -> Iterator[Any]:
        """The loader's batches, epoch after epoch, from where the run stopped, until `epochs`
        epochs or `steps` steps are done. Each batch is one step, as in ``steps()``."""
        if self.loader is None:
            raise ConfigError("Run.batches() reads the loader: pass it as Run(uri, state, loader)")
        if epochs is None and steps is None:
            raise ConfigError("Run.batches() needs epochs= or steps= to know where training ends")
        empty_epochs = 0
        while (epochs is None or self.epoch < epochs) and (steps is None or self.step < steps):
            sampler = getattr(self.loader, "sampler", None)
            if hasattr(sampler, "set_epoch"):  # DistributedSampler: a new shuffle each epoch
                sampler.set_epoch(self.epoch)
            empty = True
            for batch in self._progress.epoch():
                empty = False
                yield from self._one_step(batch)
                if steps is not None and self.step >= steps:
                    return
            empty_epochs = empty_epochs + 1 if empty else 0
            if empty_epochs > 1:  # a resumed epoch may be empty once; a fresh one never
                raise ConfigError("the loader yields no batches: the dataset is empty")
            self.epoch += 1

    def _one_step(self, item: T) -> Iterator[T]:
        try:
            yield item
        except GeneratorExit:  # the loop was left with break, after this step's work
            self._count_step()
            raise
        self._end_step()

    def _count_step(self) -> None:
        self.step += 1
        self.ledger.step(self.step)
        metrics.training_step.set(self.step)

    def _end_step(self) -> None:
        self._count_step()
        decision = self.guard.check()
        if decision.checkpoint_now:  # rebalance recommendation: save now, train on
            self.ckpt.save(self.step, self.state)
            self.ledger.charge(goodput.BLOCKING_SAVES)
        elif self.ckpt.maybe_save(self.step, self.state):
            self.ledger.charge(goodput.BLOCKING_SAVES)
        if decision.stop:
            self.report = self.guard.final_save(self.ckpt, self.step, self.state)
            self.ledger.charge(goodput.FINAL_SAVES)
            raise Preempted(self.report)

    def _close_behind(self, error: BaseException) -> None:
        """Wait for the saves already taken; the error in flight is the one to report."""
        try:
            self.ckpt.close()
        except SpotsafeError as e:
            log.error("pending checkpoint saves failed too (%s) while leaving on: %r", e, error)


def _checked(loader: Any) -> Any:
    if loader is None:
        return None
    if not isinstance(loader, Stateful):
        raise ConfigError(
            f"the loader is a {type(loader).__name__}, which cannot resume mid-epoch; use "
            "torchdata.stateful_dataloader.StatefulDataLoader with the same arguments"
        )
    unkept_randomness(loader)
    return loader
