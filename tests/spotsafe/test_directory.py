"""A framework's checkpoint directory (as HF Trainer or Lightning write it) through spotsafe."""

from __future__ import annotations

import os

from spotsafe import Checkpointer, DirectoryState


def test_checkpoint_directory_round_trips_byte_for_byte(s3_uri: str, tmp_path) -> None:
    written = tmp_path / "out" / "checkpoint-40"
    (written / "nested").mkdir(parents=True)
    files = {
        "model.safetensors": os.urandom(300_000),
        "trainer_state.json": b'{"global_step": 40}',
        "nested/rng_state.pth": os.urandom(1000),
        "empty.txt": b"",
    }
    for name, data in files.items():
        (written / name).write_bytes(data)
    ckpt = Checkpointer(s3_uri)
    ckpt.save(40, {"checkpoint_dir": DirectoryState(written)})
    ckpt.close()

    restored = tmp_path / "resumed" / "checkpoint"
    step = Checkpointer(s3_uri).restore({"checkpoint_dir": DirectoryState(restored)})
    assert step == 40
    assert {p.relative_to(restored).as_posix() for p in restored.rglob("*") if p.is_file()} == set(
        files
    )
    assert all((restored / name).read_bytes() == data for name, data in files.items())
