"""The Checkpointer: verified, fenced, asynchronous checkpoints with exact resume.

spotsafe.Run drives it around a training loop; used directly:

ckpt = Checkpointer("s3://bucket/team/run-7", every_steps=100, keep_last=3)
state = {"model": model, "optim": optim, "sched": sched, "rng": RNGState(), "data": pos}
start = (ckpt.restore(state) or 0) + 1
for step in range(start, steps + 1):
    train_step()
    ckpt.maybe_save(step, state)
ckpt.save(steps, state)  # a no-op when maybe_save saved this step already
ckpt.close()

A step's objects are never rewritten once a manifest lists them: the Checkpointer remembers every
step it committed or restored, and a second save of such a step writes nothing. With the same
content it is durable as it stands; with other content it raises StepCommittedError.
"""

from __future__ import annotations

import functools
import io
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import torch

from spotsafe import checksum, metrics
from spotsafe import state as state_mod
from spotsafe.config import CheckpointConfig
from spotsafe.errors import (
    BucketNotFoundError,
    CheckpointSaveError,
    ConfigError,
    CorruptCheckpointError,
    ObjectMissingError,
    SpotsafeError,
    StepCommittedError,
    StoragePermissionError,
    SupersededError,
)
from spotsafe.fencing import Lease
from spotsafe.manifest import (
    Manifest,
    ObjectEntry,
    describes,
    manifest_key,
    step_of,
    step_prefix,
    verified,
)
from spotsafe.retention import Committed, to_delete
from spotsafe.storage import ObjectStore, open_store

log = logging.getLogger("spotsafe")

STATE_OBJECT = "state.pt"
# Failures no retry can fix: the next call raises them instead of only reporting them.
_FATAL = (SupersededError, BucketNotFoundError, StoragePermissionError, StepCommittedError)


@dataclass(frozen=True)
class Skipped:
    """A committed checkpoint that resume did not use, and why."""

    step: int
    reason: str


class Checkpointer:
    def __init__(self, uri: str, config: CheckpointConfig | None = None, **overrides: Any):
        unknown = set(overrides) - CheckpointConfig.field_names()
        if unknown:
            raise ConfigError(f"unknown checkpoint option(s): {sorted(unknown)}")
        self.config = replace(config or CheckpointConfig(), **overrides)
        self.uri = uri
        self.store: ObjectStore = open_store(
            uri,
            max_attempts=self.config.max_attempts,
            connect_timeout_s=self.config.connect_timeout_s,
        )
        self.rank, self.world_size = _distributed_position()
        if self.world_size > 1 and self.config.every_seconds is not None:
            raise ConfigError(
                "every_seconds cannot be used with several ranks: their clocks would pick "
                "different steps for a collective save; use every_steps"
            )
        tiered = bool(self.config.memory_every_steps) and not self.config.read_only
        if tiered:  # refused before the lease is claimed: nothing written for a bad option
            from spotsafe import memory

            memory.ranks_per_node(self.world_size, self.config.memory_every_steps)
        self.attempt = self._claim_attempt()
        self._sharded = None  # what sharded saves share, for a writer of several ranks
        if self.world_size > 1 and not self.config.read_only:
            from spotsafe import sharded

            self._sharded = sharded.ShardedSaves(self, self.config.max_in_flight)
        self.memory = None
        """The memory tier between durable saves (spotsafe.memory), when configured."""
        if tiered:
            self.memory = memory.MemoryTier(
                self,
                ThreadPoolExecutor(
                    1, "spotsafe-memory", _lower_priority, (self.config.save_niceness,)
                ),
            )
        self.last_committed_step: int | None = None
        self.last_saved_step: int | None = None
        """The step of the newest save started (or restored): the one the loop need not repeat."""
        # Objects of the steps this process committed or restored, by step (a sharded save's
        # other ranks know only the step). These objects are never written again.
        self._committed: dict[int, list[ObjectEntry]] = {}
        self._cadence_warned = False
        self._last_call: tuple[int, float] | None = None  # (step, time) of the last maybe_save
        self.skipped: list[Skipped] = []
        self._durations: deque[float] = deque(maxlen=5)
        self._last_save_started = time.monotonic()
        self._pending: deque[tuple[int, Future]] = deque()
        self._last_failure: tuple[int, BaseException] | None = None
        self._staging: deque[dict[str, torch.Tensor]] = deque()  # free snapshot buffers
        # One worker keeps saves (and the retention after each commit) in order. It, and the
        # part uploads it starts, yield the CPU to training (see save_niceness).
        self._executor = ThreadPoolExecutor(
            1, "spotsafe-save", initializer=_lower_priority, initargs=(self.config.save_niceness,)
        )

    def _claim_attempt(self) -> int | None:
        """Claim this writer's attempt id before anything is read, so that a zombie of an
        earlier attempt is fenced from here on. A reader claims nothing and fences no one."""
        self.lease = Lease(self.store) if self.rank == 0 and not self.config.read_only else None
        if self.config.read_only:
            return None
        if self.world_size == 1:
            return self.lease.attempt
        import torch.distributed as dist

        shared = [self.lease.attempt if self.lease else None]
        dist.broadcast_object_list(shared, src=0)
        return shared[0]

    # ---- timing the termination handler relies on -------------------------------------------

    @property
    def expected_save_s(self) -> float | None:
        """The slowest of the last five saves (snapshot to durable commit); None before any."""
        return max(self._durations) if self._durations else None

    @property
    def in_flight(self) -> int:
        """Saves started but not yet durable (or failed)."""
        return sum(not future.done() for _, future in self._pending)

    # ---- resume ------------------------------------------------------------------------------

    def restore(self, state: Mapping[str, Any]) -> int | None:
        """Load the newest valid checkpoint into state; its step, or None when there is none.

        Checkpoints are tried newest first. A corrupt one is logged, counted and recorded in
        ``self.skipped``, never loaded. A newer manifest format or a state that does not fit
        raises, because falling back to an older checkpoint would silently lose progress.
        """
        if self.memory is not None and (step := self._restore_memory(state)) is not None:
            return step
        if self.world_size > 1:
            from spotsafe import sharded

            return sharded.restore(self, state)
        for manifest in self.candidates():
            try:
                if manifest.kind == "dcp":
                    from spotsafe import sharded

                    sharded.load_into(self, manifest, state)
                else:
                    self.load_payload(manifest, self.fetch_payload(manifest), state)
            except CorruptCheckpointError as e:
                self.report_corrupt(manifest.step, str(e))
                continue
            self.record_restore(manifest)
            return manifest.step
        return None

    def _restore_memory(self, state: Mapping[str, Any]) -> int | None:
        """The memory tier's newest snapshot, when newer than every committed checkpoint. The
        step is not counted as saved: the next durable save, or the one at the end, writes it."""
        import torch.distributed as dist

        newest: list[int | None] = [None]
        if self.rank == 0:
            committed = [step_of(o.key) for o in self.store.list("step-")
                         if o.key.endswith("/manifest.json")]  # fmt: skip
            newest[0] = max((s for s in committed if s is not None), default=None)
        dist.broadcast_object_list(newest, src=0)
        step = self.memory.restore(state, newest[0])
        if step is not None:
            log.info("resumed from step %d (the memory tier; newest durable: %s)", step, newest[0])
        return step

    def fetch_payload(self, manifest: Manifest) -> Any:
        """The verified, deserialised state of a single-process ("torch") checkpoint."""
        return torch.load(
            io.BytesIO(self.fetch(manifest, manifest.objects[0])),
            map_location="cpu",
            weights_only=True,
        )

    def load_payload(self, manifest: Manifest, payload: Any, state: Mapping[str, Any]) -> None:
        state_mod.load(state, payload, f"{self.uri}/{step_prefix(manifest.step)}")

    def candidates(self) -> list[Manifest]:
        """Committed manifests, newest first, without those of a superseded lineage."""
        listing = self.store.list("step-")
        steps = sorted({s for o in listing if (s := step_of(o.key)) is not None})
        committed = {o.key for o in listing if o.key.endswith("/manifest.json")}
        manifests: list[Manifest] = []
        newest_attempt = 0
        for step in steps:
            key = manifest_key(step)
            if key not in committed:
                continue
            try:
                manifest = Manifest.from_json(self.store.get(key), f"{self.uri}/{key}")
            except (CorruptCheckpointError, ObjectMissingError) as e:
                self.report_corrupt(step, str(e))
                continue
            if manifest.attempt < newest_attempt:
                self.skipped.append(
                    Skipped(step, f"written by superseded attempt {manifest.attempt}")
                )
                log.info(
                    "ignoring step %d: written by superseded attempt %d", step, manifest.attempt
                )
                continue
            newest_attempt = manifest.attempt
            manifests.append(manifest)
        return manifests[::-1]

    def fetch(self, manifest: Manifest, entry: ObjectEntry) -> bytes:
        """One object of a checkpoint, verified against its manifest entry."""
        key = step_prefix(manifest.step) + entry.key
        try:
            data = self.store.get(key)
        except ObjectMissingError as e:
            raise CorruptCheckpointError(f"{self.uri}/{key} is missing") from e
        return verified(entry, data, f"{self.uri}/{key}")

    def report_corrupt(self, step: int, reason: str) -> None:
        log.warning("skipping corrupt checkpoint at step %d: %s", step, reason)
        metrics.corrupt_skipped.inc()
        self.skipped.append(Skipped(step, reason))

    def record_restore(self, manifest: Manifest) -> None:
        """A checkpoint was loaded: its step counts as saved and its objects are never written
        again."""
        self.last_committed_step = self.last_saved_step = manifest.step
        self._committed[manifest.step] = manifest.objects
        metrics.record_commit(manifest.step, manifest.created_at)
        log.info("resumed from step %d (%s)", manifest.step, self.uri)

    # ---- save --------------------------------------------------------------------------------

    def due_by_step(self, step: int) -> bool:
        """Due by the step cadence: the same on every rank, unlike a cadence by time."""
        return self.config.every_steps is not None and step % self.config.every_steps == 0

    def due(self, step: int) -> bool:
        c = self.config
        by_time = (
            c.every_seconds is not None
            and time.monotonic() - self._last_save_started >= c.every_seconds
        )
        return self.due_by_step(step) or by_time

    def maybe_save(self, step: int, state: Mapping[str, Any]) -> bool:
        """Save if the step is due. A due save is skipped, not waited for, while the in-flight
        slots are full (storage slow or down): training goes on. True when a save started
        (a durable one, or the memory tier's)."""
        self._reap()
        now = time.monotonic()
        step_s = None
        if self._last_call is not None and step > self._last_call[0]:
            step_s = (now - self._last_call[1]) / (step - self._last_call[0])
        self._last_call = (step, now)
        # A step the durable cadence saves gets no memory copy too, which would block twice.
        kept = (
            self.memory is not None
            and not self.due_by_step(step)
            and self.memory.maybe_save(step, state)
        )
        if not self.due(step):
            return kept
        if self.world_size == 1 and len(self._pending) >= self.config.max_in_flight:
            self._skip(step, now - self._last_save_started, step_s)
            return False
        self.save(step, state)
        return True

    def _skip(self, step: int, in_flight_s: float, step_s: float | None) -> None:
        """A due save skipped because the slots are busy: counted, and said once, with what
        was measured, since the cadence actually achieved is now below the one configured."""
        metrics.saves_skipped.inc()
        if self._cadence_warned:
            log.debug("checkpoint at step %d skipped: a save is still in flight", step)
            return
        self._cadence_warned = True
        save_s = max(in_flight_s, self.expected_save_s or 0.0)
        advice = ""
        if step_s and self.config.every_steps:
            # This save outlasted every_steps steps, whatever the average says: more are needed.
            needed = max(math.ceil(save_s / step_s), self.config.every_steps + 1)
            advice = (
                f"; a step takes {step_s:.3f} s, so every_steps >= {needed} keeps up "
                f"(every_steps is {self.config.every_steps})"
            )
        log.warning(
            "checkpoint at step %d skipped: the previous save is still in flight after %.2f s "
            "(saves take up to %.2f s here). Checkpoints land less often than configured: see "
            "spotsafe_checkpoint_interval_steps and spotsafe_checkpoint_saves_skipped_total%s",
            step,
            in_flight_s,
            save_s,
            advice,
        )

    def save(self, step: int, state: Mapping[str, Any]) -> None:
        """Snapshot state now and make it durable (in the background when async_save)."""
        if self.config.read_only:
            raise ConfigError(f"this Checkpointer of {self.uri} is read_only; it cannot save")
        self._reap()
        if self.world_size > 1 and (step in self._committed or step == self.last_saved_step):
            # DCP metadata carries a fresh save id each time: there is no content to compare.
            raise StepCommittedError(
                f"step {step} is already saved (committed or in flight) at {self.uri}; a sharded "
                "save of a saved step is refused before anything is written"
            )
        started = time.monotonic()
        self._last_save_started = started
        if self.last_saved_step is not None and step > self.last_saved_step:
            metrics.save_interval_steps.set(step - self.last_saved_step)
        self.last_saved_step = step
        while len(self._pending) >= self.config.max_in_flight:
            self._wait_oldest()
        if self.world_size > 1:
            write = self._sharded.stage(step, state, started)
        else:
            staging = self._staging.pop() if self._staging else {}
            snap = state_mod.snapshot(state, staging)
            write = functools.partial(self._write, step, snap, staging, started)
        metrics.blocked_duration.observe(time.monotonic() - started)
        if self.config.async_save:
            self._pending.append((step, self._executor.submit(write)))
        else:
            self._pending.append((step, _done(write)))
            self._reap()

    def _write(self, step: int, snap: dict[str, Any], staging: dict, started: float) -> None:
        """Serialise straight into the upload's parts: no second full copy of the state. A step
        this process committed already is only measured, never written again."""
        if step in self._committed:
            fingerprint = checksum.Fingerprint()
            try:
                torch.save(snap, fingerprint)
            finally:
                self._staging.append(staging)
            self._confirm_unchanged(step, fingerprint.size, fingerprint.crc32c)
            return
        key = f"attempt-{self.attempt}/{STATE_OBJECT}"
        with self.store.writer(step_prefix(step) + key, state_mod.nbytes(snap)) as out:
            try:
                torch.save(snap, out)
            finally:
                self._staging.append(staging)  # serialised: the next snapshot may reuse it
        entry = ObjectEntry(key, out.written.size, crc32c=out.written.crc32c)
        self.commit(Manifest(step, self.attempt, 1, "torch", [entry]))
        self.record_save(step, started)

    def _confirm_unchanged(self, step: int, size: int, crc32c: str) -> None:
        """A save of a step that is committed already: nothing is written. The same content is
        durable as it stands; other content is refused, since committed objects never change."""
        committed = self._committed[step]
        if len(committed) == 1 and describes(committed[0], size, crc32c):
            log.info("step %d is already committed with the same content; nothing to write", step)
            return
        raise StepCommittedError(
            f"step {step} is already committed at {self.uri} with other content, and committed "
            "checkpoints are never rewritten; save changed state under a later step"
        )

    def commit(self, manifest: Manifest) -> None:
        """Create the manifest (create-only) once every object is durable. Retention follows in
        the background, after the commit, so it never delays durability."""
        key = manifest_key(manifest.step)
        self.lease.check(f"commit step {manifest.step}")
        if manifest.step in {s.step for s in self.skipped}:
            self.store.delete([key])  # resume rejected it (corrupt or stale): never a checkpoint
        if not self.store.put_if_absent(key, manifest.to_json()):
            raise CheckpointSaveError(
                f"step {manifest.step} was committed at {self.uri} by another writer meanwhile; "
                "this save's objects are not listed anywhere and nothing was overwritten"
            )
        self._committed[manifest.step] = manifest.objects
        metrics.bytes_written.inc(manifest.total_bytes)
        metrics.record_commit(manifest.step)
        self.last_committed_step = manifest.step
        log.info(
            "committed step %d (%d bytes) to %s", manifest.step, manifest.total_bytes, self.uri
        )
        self._executor.submit(self._retain, manifest.step)

    def record_save(self, step: int, started: float) -> None:
        """A save of step is durable: the step is never written again (a sharded save's other
        ranks know only the step, rank 0 its objects too), and the save is timed."""
        self._committed.setdefault(step, [])
        duration = time.monotonic() - started
        self._durations.append(duration)
        metrics.save_duration.observe(duration)

    def _retain(self, newest_valid: int) -> None:
        try:
            self._apply_retention(newest_valid)
        except SpotsafeError as e:
            log.warning("retention after step %d skipped: %s", newest_valid, e)

    def _apply_retention(self, newest_valid: int) -> None:
        c = self.config
        listing = self.store.list("step-")
        committed_keys = {o.key for o in listing if o.key.endswith("/manifest.json")}
        steps = {s for o in listing if (s := step_of(o.key)) is not None}
        committed = []
        for step in sorted(steps):
            if manifest_key(step) in committed_keys:
                created = time.time()
                if c.milestone_every and step % c.milestone_every == 0 and c.max_age_s:
                    raw = self.store.get(manifest_key(step))
                    created = Manifest.from_json(raw, manifest_key(step)).created_at
                committed.append(Committed(step, created))
        doomed = set(
            to_delete(
                committed, newest_valid, c.keep_last, c.milestone_every, c.max_age_s, time.time()
            )
        )
        # Leftovers of saves that never committed, older than the newest commit.
        doomed |= {s for s in steps if s < newest_valid and manifest_key(s) not in committed_keys}
        if not doomed:
            return
        self.lease.check(f"delete steps {sorted(doomed)}")
        for step in sorted(doomed):
            keys = [o.key for o in listing if step_of(o.key) == step]
            # The manifest goes first: a half-deleted checkpoint is then simply uncommitted.
            keys.sort(key=lambda k: not k.endswith("/manifest.json"))
            self.store.delete(keys[:1])
            self.store.delete(keys[1:])
        log.info("retention deleted steps %s", sorted(doomed))

    # ---- completion and failures -------------------------------------------------------------

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until every pending save is durable. Raises CheckpointSaveError if one failed,
        TimeoutError if they are not all durable within timeout_s."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self._pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            step, future = self._pending[0]
            try:
                future.exception(timeout=left)
            except TimeoutError as e:
                raise TimeoutError(
                    f"checkpoint at step {step} not durable within {timeout_s:.1f} s"
                ) from e
            self._wait_oldest()
        if self._last_failure is not None:
            step, error = self._last_failure
            raise CheckpointSaveError(
                f"the newest checkpoint (step {step}) is not durable: {error}"
            ) from error

    def close(self) -> None:
        """Wait for pending saves, then stop the background worker."""
        try:
            self.wait()
        finally:
            self._executor.shutdown(wait=True)
            if self.memory is not None:
                self.memory.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reap(self) -> None:
        while self._pending and self._pending[0][1].done():
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        """Settle the oldest pending save. A failure is logged and counted here, on the training
        thread's next call; it is raised only when no retry can fix it (training would otherwise
        go on without checkpoints), and wait() raises while the newest save is not durable."""
        step, future = self._pending.popleft()
        error = future.exception()
        self._last_failure = None if error is None else (step, error)
        if error is None:
            return
        metrics.save_failures.labels(reason=type(error).__name__).inc()
        log.error("checkpoint at step %d failed: %s", step, error)
        if isinstance(error, _FATAL):
            raise error


def _done(fn: Any) -> Future:
    """Run fn now; a Future holding its outcome, so sync and async saves share one path."""
    future: Future = Future()
    try:
        future.set_result(fn())
    except Exception as e:  # noqa: BLE001 - handed to the caller through the future
        future.set_exception(e)
    return future


def _lower_priority(niceness: int) -> None:
    """Raise this thread's nice value (Linux keeps one per thread; threads it starts inherit it)."""
    tid = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))


def _distributed_position() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
