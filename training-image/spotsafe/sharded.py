"""Sharded state through torch.distributed.checkpoint, under the same manifest and commit.

Every rank stages its shard with DCP's FileSystemWriter on local disk (the fast tier), uploads
it under ``step-<N>/attempt-<A>/``, and reports sizes and checksums to rank 0. That report is
a collective, so once rank 0 has every rank's list, every shard is durable; only then does rank
0 commit the manifest, create-only and fenced. Resume downloads and verifies every object, then
lets DCP reshard them onto whatever world size is loading (one process included).

Saves here are collective and synchronous: every rank calls save() at the same step (use
``every_steps``; the step-boundary agreement in spotsafe.agreement is where a stop step is
agreed), and training resumes once the commit is decided.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotsafe.errors import CheckpointSaveError, CorruptCheckpointError, StateMismatchError
from spotsafe.manifest import Manifest, ObjectEntry, step_prefix

if TYPE_CHECKING:
    from spotsafe.checkpointer import Checkpointer


def save(ckpt: Checkpointer, step: int, state: Mapping[str, Any]) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    with tempfile.TemporaryDirectory(prefix=f"spotsafe-step-{step}-") as staging:
        dcp.save(dict(state), storage_writer=dcp.FileSystemWriter(staging))
        prefix = f"attempt-{ckpt.attempt}/"
        entries = []
        for path in sorted(p for p in Path(staging).iterdir() if p.is_file()):
            written = ckpt.store.put_file(step_prefix(step) + prefix + path.name, path)
            entries.append(ObjectEntry(prefix + path.name, written.size, crc32c=written.crc32c))
    gathered: list[list[ObjectEntry]] | None = [[] for _ in range(ckpt.world_size)]
    dist.gather_object(entries, gathered if ckpt.rank == 0 else None, dst=0)
    outcome: list[str | None] = [None]
    if ckpt.rank == 0:
        objects = [entry for rank_entries in gathered for entry in rank_entries]
        try:
            ckpt.commit(Manifest(step, ckpt.attempt, ckpt.world_size, "dcp", objects))
        except Exception as e:  # noqa: BLE001 - every rank must learn the outcome, then raise
            outcome[0] = f"{type(e).__name__}: {e}"
    dist.broadcast_object_list(outcome, src=0)
    if outcome[0] is not None:
        raise CheckpointSaveError(f"sharded checkpoint at step {step} failed: {outcome[0]}")


def load_into(ckpt: Checkpointer, manifest: Manifest, state: Mapping[str, Any]) -> None:
    """Verify and load one DCP checkpoint into state in a single process."""
    with tempfile.TemporaryDirectory(prefix=f"spotsafe-step-{manifest.step}-") as local:
        _download(ckpt, manifest, Path(local))
        _load(ckpt, manifest, state, Path(local))


def restore(ckpt: Checkpointer, state: Mapping[str, Any]) -> int | None:
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
                ckpt._restored(manifest)
                return manifest.step
        if ckpt.rank == 0 or problem:
            ckpt.report_corrupt(manifest.step, problem or "corrupt as another rank read it")
    return None


def _download(ckpt: Checkpointer, manifest: Manifest, local: Path) -> None:
    for entry in manifest.objects:
        (local / Path(entry.key).name).write_bytes(ckpt.fetch(manifest, entry))


def _load(ckpt: Checkpointer, manifest: Manifest, state: Mapping[str, Any], local: Path) -> None:
    import torch.distributed.checkpoint as dcp

    try:
        dcp.load(dict(state), storage_reader=dcp.FileSystemReader(local))
    except (RuntimeError, KeyError, ValueError) as e:
        raise StateMismatchError(
            f"checkpoint {ckpt.uri}/{step_prefix(manifest.step)} does not fit the state: {e}"
        ) from e
