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
import math
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from spotsafe import goodput, launcher, metrics, worker_signals
from spotsafe.checkpointer import Checkpointer
from spotsafe.data import LoaderGenerator, LoaderPosition, unkept_randomness
from spotsafe.errors import ConfigError, SpotsafeError, StateMismatchError
from spotsafe.identity import IDENTITY_KEY, RunIdentity, run_settings
from spotsafe.preemption import EXIT_PREEMPTED, PreemptionGuard
from spotsafe.state import RNGState, Stateful, optimizers

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


class _Kept:
    """A state entry as it was kept before: saved as that."""

    def __init__(self, state_dict: dict[str, Any]) -> None:
        self._state_dict = state_dict

    def state_dict(self) -> dict[str, Any]:
        return self._state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        raise ConfigError("a kept state entry is only saved")


class Run:
    """One attempt of a training run; see the module docstring.

    checkpoint: a checkpoint URI (options are CheckpointConfig fields) or a Checkpointer.
    state: Stateful objects by name (model, optimizer, scheduler, ...), as for Checkpointer.
    loader: a StatefulDataLoader for ``batches()``; its position is saved with every step.
    accumulate: micro-batches (steps) per optimizer step. A checkpoint holds no gradients, so
        saves, the final save after a notice and the save at the end are taken only at the end
        of an accumulation: at steps that are multiples of it.
    """

    def __init__(
        self,
        checkpoint: str | Checkpointer,
        state: Mapping[str, Any],
        loader: Any = None,
        *,
        accumulate: int = 1,
        **options: Any,
    ) -> None:
        for key in (RUN_KEY, IDENTITY_KEY):
            if key in state:
                raise ConfigError(f"state[{key!r}] is the run's own entry; name yours otherwise")
        if not isinstance(accumulate, int) or accumulate < 1:
            raise ConfigError(
                f"accumulate={accumulate!r}: give the micro-batches per optimizer "
                "step, a whole number of at least 1"
            )
        self.accumulate = accumulate
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
        for option in ("every_steps", "memory_every_steps"):
            every = getattr(self.ckpt.config, option)
            if every is not None and every % accumulate:
                raise ConfigError(
                    f"{option}={every} is not a multiple of accumulate={accumulate}: saves are "
                    "taken only at the end of an accumulation; use "
                    f"{option}={math.lcm(every, accumulate)}"
                )
        self._progress = _Progress(self)
        identity = RunIdentity(
            lambda: run_settings(state, self.loader, self.ckpt.world_size, accumulate),
            lambda: f"the checkpoint at {self.ckpt.uri}",
        )
        # The identity comes first: a change between runs is named before anything is loaded.
        self.state = {IDENTITY_KEY: identity, **state, RUN_KEY: self._progress}
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
        self._optimizers = optimizers(state)
        self._hooks: list[Any] = []
        self._optimizer_stepped_at = 0  # the step in progress when an optimizer last stepped
        self._save_at_boundary = False  # a rebalance recommendation taken mid-accumulation
        self._notice_deferred = False
        self._unfetched: dict[str, Any] | None = None  # see _keep_unfetched
        self._end_state: Mapping[str, Any] | None = None  # what the end saves, if not the state

    def __enter__(self) -> Run:
        self.ledger.start()
        self._hooks = [o.register_step_post_hook(self._optimizer_stepped) for o in self._optimizers]
        self.guard.__enter__()
        try:
            self.resumed_from = self.ckpt.restore(self.state)
            lost = self.guard.account_lost_steps(self.ckpt, self.resumed_from)
            self._account_repeats(lost)
        except BaseException:
            self._remove_hooks()
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
        metrics.attempt.set(attempt)
        metrics.redo_until_step.set(self.ledger.redo_until)
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
                inside = self.step % self.accumulate  # steps of an unfinished accumulation
                if self.step and not inside and self.ckpt.last_saved_step != self.step:
                    self.ckpt.save(self.step, self._end_state or self.state)
                self.ckpt.close()
                if inside:
                    raise ConfigError(
                        f"the run ended at step {self.step}, inside an accumulation of "
                        f"accumulate={self.accumulate} micro-batches whose gradients no "
                        f"checkpoint holds, so step {self.step} is not saved; end the run at a "
                        f"multiple of {self.accumulate}"
                    )
                code = 0
            else:
                self._close_behind(error)
        finally:
            self._remove_hooks()
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

    @property
    def accumulation_boundary(self) -> bool:
        """Whether the step in progress ends an accumulation (its number is a multiple of
        ``accumulate``): the step at which to step the optimizer."""
        return (self.step + 1) % self.accumulate == 0

    def steps(self, total: int) -> Iterator[int]:
        """Step numbers after the restored one, up to total. Each step's work runs between one
        number and the next; leaving the loop with break counts the step in progress as done
        when it stepped an optimizer of the state (or the state has none): a break before the
        optimizer's step leaves it uncounted."""
        self._check_total(total)
        while self.step < total:
            yield from self._one_step(self.step + 1)

    def batches(self, epochs: int | None = None, steps: int | None = None) -> Iterator[Any]:
        """The loader's batches, epoch after epoch, from where the run stopped, until `epochs`
        epochs or `steps` steps are done. Each batch is one step, as in ``steps()``."""
        if self.loader is None:
            raise ConfigError("Run.batches() reads the loader: pass it as Run(uri, state, loader)")
        if epochs is None and steps is None:
            raise ConfigError("Run.batches() needs epochs= or steps= to know where training ends")
        if steps is not None:
            self._check_total(steps)
        elif hasattr(self.loader, "__len__"):
            self._check_total(epochs * len(self.loader))
        empty_epochs = 0
        while (epochs is None or self.epoch < epochs) and (steps is None or self.step < steps):
            self._keep_unfetched()
            sampler = getattr(self.loader, "sampler", None)
            if hasattr(sampler, "set_epoch"):  # DistributedSampler: a new shuffle each epoch
                sampler.set_epoch(self.epoch)
            empty = True
            for batch in self._progress.epoch():
                empty = False
                yield from self._one_step(batch)
                if steps is not None and self.step >= steps:
                    return
                self._keep_unfetched()
            empty_epochs = empty_epochs + 1 if empty else 0
            if empty_epochs > 1:  # a resumed epoch may be empty once; a fresh one never
                raise ConfigError("the loader yields no batches: the dataset is empty")
            self.epoch += 1

    def _check_total(self, total: int) -> None:
        if total % self.accumulate:
            raise ConfigError(
                f"training ends at step {total}, inside an accumulation of "
                f"accumulate={self.accumulate} micro-batches; end it at a multiple of "
                f"{self.accumulate}"
            )

    def _keep_unfetched(self) -> None:
        """Before the loader fetches a batch, keep the run's own entry as it is: a loop left
        with break before that batch's work ends with it saved as it was, so the batch is
        trained when the run goes on. Not needed when the end saves nothing (the step is saved
        already) or when no optimizer tells whether a step's work was done."""
        unsaved = self.step and self.step != self.ckpt.last_saved_step
        self._unfetched = self._progress.state_dict() if unsaved and self._optimizers else None

    def _optimizer_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_stepped_at = self.step + 1

    def _remove_hooks(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _one_step(self, item: T) -> Iterator[T]:
        try:
            yield item
        except GeneratorExit:  # the loop was left with break
            # Counted when the step's work is done: an optimizer of the state stepped in it.
            # `if run.step >= N: break` at the top of the loop trains nothing, and a restart of
            # the finished run then counts, saves and writes nothing.
            if not self._optimizers or self._optimizer_stepped_at == self.step + 1:
                self._count_step()
            elif self._unfetched is not None:  # the batch was fetched for nothing
                self._end_state = {**self.state, RUN_KEY: _Kept(self._unfetched)}
            raise
        self._end_step()

    def _count_step(self) -> None:
        self._end_state = None
        self.step += 1
        self.ledger.step(self.step)
        metrics.training_step.set(self.step)

    def _end_step(self) -> None:
        stepped = self._optimizer_stepped_at == self.step + 1
        if stepped and not self.accumulation_boundary:
            raise ConfigError(
                f"an optimizer stepped at step {self.step + 1}, inside an accumulation of "
                f"accumulate={self.accumulate} micro-batches; step it when "
                "run.accumulation_boundary is true (a counter of your own restarts at resume)"
            )
        self._count_step()
        decision = self.guard.check()  # every step on every rank: the agreement is collective
        self._save_at_boundary |= decision.checkpoint_now
        if self.step % self.accumulate:
            # Inside an accumulation the gradients are state no checkpoint holds: a notice
            # or a recommendation is taken at the accumulation's end.
            if decision.stop and not self._notice_deferred:
                self._notice_deferred = True
                log.warning(
                    "termination notice at step %d, inside an accumulation: the final save "
                    "is made at its end, step %d",
                    self.step,
                    self.step + self.accumulate - self.step % self.accumulate,
                )
            return
        if self._save_at_boundary:  # rebalance recommendation: save now, train on
            self._save_at_boundary = False
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
