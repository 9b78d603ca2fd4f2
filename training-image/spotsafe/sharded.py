"""Sharded state through torch.distributed.checkpoint, under the same manifest and commit.

A save blocks training only while every rank copies its shard into host staging buffers (each
DTensor's local shard copied as any tensor is, by spotsafe.state.stage: buffers reused from save
to save, pinned when CUDA is present; then wrapped in the DTensor's own mesh and placements,
where DCP's stager deep-copies that metadata, mesh included, for every DTensor at every save):
one staged copy of the rank's shard per save in flight. The rest runs on the save thread,
on a process group of its own so it never meets the training's collectives: DCP serialises
the staged shard straight into its objects under ``step-<N>/attempt-<A>/`` (see
spotsafe.storage.dcp_files: parts upload while later ones fill, each object's CRC32C carried on
as the bytes pass, no local copy written and read back), and every rank reports its objects (or
its failure) to rank 0. That report is a collective, so once rank 0 has every rank's list,
every shard is durable; only then does rank 0 commit the manifest, create-only and fenced, and
tell every rank the outcome. Resume downloads and verifies every object, then lets DCP reshard
them onto whatever world size is loading (one process included).

Every rank calls save() at the same step (use ``every_steps``; the step-boundary agreement in
spotsafe.agreement is where a stop step is agreed); a save waits for a free in-flight slot on
every rank alike, and is never skipped on one rank alone.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from spotsafe import state as state_mod
from spotsafe.errors import (
    CheckpointSaveError,
    ConfigError,
    CorruptCheckpointError,
    StateMismatchError,
)
from spotsafe.identity import IDENTITY_KEY, written_without_identity
from spotsafe.manifest import Manifest, ObjectEntry, step_prefix
from spotsafe.storage import ObjectStore


class Writer(Protocol):
    """What sharded saves and resume use of the Checkpointer that drives them."""

    uri: str
    store: ObjectStore
    rank: int
    world_size: int
    attempt: int | None

    def commit(self, manifest: Manifest) -> None: ...
    def candidates(self) -> list[Manifest]: ...
    def fetch(self, manifest: Manifest, entry: ObjectEntry) -> bytes: ...
    def fetch_payload(self, manifest: Manifest) -> Any: ...
    def load_payload(self, manifest: Manifest, payload: Any, state: Mapping[str, Any]) -> None: ...
    def report_corrupt(self, step: int, reason: str) -> None: ...
    def record_save(self, step: int, started: float) -> None: ...
    def record_restore(self, manifest: Manifest) -> None: ...


class ShardedSaves:
    """A writer's background sharded saves: their process group and one set of staging buffers
    per slot."""

    def __init__(self, ckpt: Writer, max_in_flight: int) -> None:
        import torch.distributed as dist

        self.ckpt = ckpt
        self.group = dist.new_group(backend="gloo")  # collective: every rank builds its own
        self._free: list[dict[str, Any]] = [{} for _ in range(max_in_flight)]
        self._lock = threading.Lock()

    def stage(self, step: int, state: Mapping[str, Any], started: float) -> Callable[[], None]:
        """Copy this rank's shard to host memory now; return the rest of the save, to run on
        the save thread."""
        with self._lock:  # a slot is free: the caller waited for one
            staging = self._free.pop()
        try:
            shards: dict[str, Any] = {}
            dicts = {key: state_mod.local_shards(obj.state_dict(), key, shards)
                     for key, obj in dcp_entries(state).items()}  # fmt: skip
            staged = {key: state_mod.as_sharded(value, key, shards)
                      for key, value in state_mod.stage(dicts, staging).items()}  # fmt: skip
        except BaseException:
            self._give_back(staging)
            raise
        return lambda: self._write(step, staged, staging, started)

    def _give_back(self, staging: dict[str, Any]) -> None:
        with self._lock:
            self._free.append(staging)

    def _write(self, step: int, staged: dict, staging: dict[str, Any], started: float) -> None:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        from spotsafe.storage.dcp_files import ObjectFiles, ObjectWriter

        ckpt = self.ckpt
        entries: list[ObjectEntry] = []
        problem = None
        try:
            prefix = f"attempt-{ckpt.attempt}/"
            files = ObjectFiles(ckpt.store, step_prefix(step) + prefix, state_mod.nbytes(staged))
            try:
                dcp.save(staged, storage_writer=ObjectWriter(files), process_group=self.group)
            finally:
                self._give_back(staging)  # written out: the next save may stage into it
            entries = [ObjectEntry(prefix + name, written.size, written.crc32c)
                       for name, written in sorted(files.store_kept().items())]  # fmt: skip
        except Exception as e:  # noqa: BLE001 - every rank must learn of it, then raise
            problem = f"rank {ckpt.rank}: {type(e).__name__}: {e}"
        gathered: list | None = [None] * ckpt.world_size if ckpt.rank == 0 else None
        dist.gather_object((entries, problem), gathered, dst=0, group=self.group)
        outcome: list[str | None] = [None]
        if ckpt.rank == 0:
            problems = [p for _, p in gathered if p]
            try:
                if problems:
                    raise CheckpointSaveError("; ".join(problems))
                objects = [entry for rank_entries, _ in gathered for entry in rank_entries]
                ckpt.commit(Manifest(step, ckpt.attempt, ckpt.world_size, "dcp", objects))
            except Exception as e:  # noqa: BLE001 - every rank must learn the outcome, then raise
                outcome[0] = f"{type(e).__name__}: {e}"
        dist.broadcast_object_list(outcome, src=0, group=self.group)
        if outcome[0] is not None:
            raise CheckpointSaveError(f"sharded checkpoint at step {step} failed: {outcome[0]}")
        ckpt.record_save(step, started)


def load_into(ckpt: Writer, manifest: Manifest, state: Mapping[str, Any]) -> None:
    """Verify and load one DCP checkpoint into state in a single process."""
    with tempfile.TemporaryDirectory(prefix=f"spotsafe-step-{manifest.step}-") as local:
        _download(ckpt, manifest, Path(local))
        _load(ckpt, manifest, state, Path(local))


def restore(ckpt: Writer, state: Mapping[str, Any]) -> int | None:
    """Collective resume: rank 0 lists the candidates; every rank downloads and verifies the
    newest; all load it (DCP's load is collective) only if it verified on every rank. A
    single-process checkpoint is loaded whole by every rank: its state is replicated."""
    import torch
    import torch.distributed as dist

    shared: list[list[Manifest] | None] = [ckpt.candidates() if ckpt.rank == 0 else None]
    dist.broadcast_object_list(shared, src=0)
    for manifest in shared[0]:
        with tempfile.TemporaryDirectory(prefix=f"spotsafe-step-{manifest.step}-") as local:
            problem, payload = "", None
            try:
                if manifest.kind == "dcp":
                    _download(ckpt, manifest, Path(local))
                else:
                    payload = ckpt.fetch_payload(manifest)
            except CorruptCheckpointError as e:
                problem = str(e)
            failed = torch.tensor([1 if problem else 0])
            dist.all_reduce(failed, op=dist.ReduceOp.MAX)
            if not failed.item():
                if manifest.kind == "dcp":
                    _load(ckpt, manifest, state, Path(local))
                else:
                    ckpt.load_payload(manifest, payload, state)
                ckpt.record_restore(manifest)
                return manifest.step
        if ckpt.rank == 0 or problem:
            ckpt.report_corrupt(manifest.step, problem or "corrupt as another rank read it")
    return None


def _download(ckpt: Writer, manifest: Manifest, local: Path) -> None:
    for entry in manifest.objects:
        (local / Path(entry.key).name).write_bytes(ckpt.fetch(manifest, entry))


def _load(ckpt: Writer, manifest: Manifest, state: Mapping[str, Any], local: Path) -> None:
    import torch.distributed.checkpoint as dcp

    entries = dcp_entries(state)
    reader = dcp.FileSystemReader(local)
    live = {key: obj.state_dict() for key, obj in entries.items()}
    saved_keys = set(reader.read_metadata().state_dict_metadata)
    _fall_back_to_rank_0(live, saved_keys, ckpt.rank)
    if IDENTITY_KEY in live:  # a run's settings first: a change between runs is named as such
        if not any(key.split(".")[0] == IDENTITY_KEY for key in saved_keys):
            raise written_without_identity(f"{ckpt.uri}/{step_prefix(manifest.step)}")
        dcp.load({IDENTITY_KEY: live[IDENTITY_KEY]}, storage_reader=reader)
        entries[IDENTITY_KEY].load_state_dict(live[IDENTITY_KEY])
    try:
        dcp.load(live, storage_reader=reader)
        for key, obj in entries.items():
            obj.load_state_dict(live[key])
    except (RuntimeError, KeyError, ValueError) as e:
        raise StateMismatchError(
            f"checkpoint {ckpt.uri}/{step_prefix(manifest.step)} does not fit the state: {e}"
        ) from e


def _fall_back_to_rank_0(live: dict[str, Any], saved_keys: set[str], rank: int) -> None:
    """An entry kept per rank (``rank<N>`` inside a state dict, as the Run keeps its
    generators) that the checkpoint lacks, because a smaller world saved it, reads rank 0's."""
    mine = f"rank{rank}"
    if rank == 0:
        return
    for key, value in live.items():
        if (
            isinstance(value, dict)
            and mine in value
            and not any(saved.startswith(f"{key}.{mine}.") for saved in saved_keys)
        ):
            value["rank0"] = value.pop(mine)


class _OptimizerState:
    """An optimizer's state keyed by parameter name, through DCP's optimizer state-dict
    functions. A fresh optimizer's own state_dict() has no per-parameter state yet, so a
    sharded load would find nothing to fill and silently drop, say, Adam's moments."""

    def __init__(self, model: Any, optim: Any) -> None:
        self.model, self.optim = model, optim

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(self.model, self.optim)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        set_optimizer_state_dict(self.model, self.optim, state_dict)


def dcp_entries(state: Mapping[str, Any]) -> dict[str, Any]:
    """The state as DCP saves and loads it: each optimizer through the model in the state that
    holds its parameters."""
    import torch

    modules = [obj for obj in state.values() if isinstance(obj, torch.nn.Module)]
    entries: dict[str, Any] = state_mod.stateful_items(state)
    for key, obj in state.items():
        if not isinstance(obj, torch.optim.Optimizer):
            continue
        params = {id(p) for group in obj.param_groups for p in group["params"]}
        owner = next((m for m in modules if params <= {id(p) for p in m.parameters()}), None)
        if owner is None:
            raise ConfigError(
                f"state[{key!r}] optimizes parameters of no model in the state; under several "
                "ranks its state is saved by parameter name: put the model it trains in the "
                "state too"
            )
        entries[key] = _OptimizerState(owner, obj)
    return entries
