"""Sharded state through torch.distributed.checkpoint: two gloo ranks (real processes) save one
checkpoint under the same manifest and commit; one process resumes it, resharded."""

from __future__ import annotations

import textwrap

import torch
from spotsafe import Checkpointer, Extras
from spotsafe_harness import run_ranks, s3_keys

# The weight is a DTensor sharded by rows over the ranks' mesh: each rank holds half of it.
RANK_SAVE = textwrap.dedent(
    """
    import sys, torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from spotsafe import Checkpointer, Extras

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    full = torch.arange(48, dtype=torch.float32).reshape(8, 6)
    weight = distribute_tensor(full, mesh, [Shard(0)])
    ckpt = Checkpointer(sys.argv[1], every_steps=5)
    state = {"model": Extras(weight=weight), "extras": Extras(lr=torch.tensor(0.5))}
    assert ckpt.restore(state) is None
    for step in range(1, 11):
        ckpt.maybe_save(step, state)
    ckpt.close()
    print(weight.to_local().shape[0], ckpt.attempt, flush=True)
    dist.destroy_process_group()
    """
)


# A save returns once the shard is staged; training changes the weight while it uploads.
RANK_ASYNC_SAVE = textwrap.dedent(
    """
    import sys, torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from spotsafe import Checkpointer, Extras

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    weight = distribute_tensor(torch.ones(256, 1024), mesh, [Shard(0)])
    ckpt = Checkpointer(sys.argv[1])
    ckpt.save(1, {"model": Extras(weight=weight)})
    in_flight = ckpt.in_flight
    weight.to_local().add_(1)  # the next training step, while the save uploads
    ckpt.close()
    print(in_flight, ckpt.last_committed_step, flush=True)
    dist.destroy_process_group()
    """
)


def _ranks(script: str, uri: str, env: dict[str, str] | None = None) -> list[str]:
    """Run script on two gloo ranks; their stdout."""
    ranks = run_ranks(script, uri, env=env)
    assert [rank.returncode for rank in ranks] == [0, 0], [rank.stderr for rank in ranks]
    return [rank.stdout for rank in ranks]


def test_a_sharded_save_blocks_only_for_staging(s3_uri: str, proxy) -> None:
    proxy.chunk_delay_s = 0.005  # the upload takes seconds; staging a shard, milliseconds
    outputs = _ranks(RANK_ASYNC_SAVE, s3_uri, {"AWS_ENDPOINT_URL": proxy.url})
    # save() returned with the save still in flight on both ranks; close() saw it committed.
    assert [out.split() for out in outputs] == [["1", "1"], ["1", "None"]]
    state = {"model": Extras(weight=torch.zeros(256, 1024))}
    assert Checkpointer(s3_uri, read_only=True).restore(state) == 1
    assert torch.equal(state["model"]["weight"], torch.ones(256, 1024)), "not the staged values"


def test_two_ranks_save_one_process_resumes_resharded(s3_uri: str) -> None:
    outputs = _ranks(RANK_SAVE, s3_uri)
    # Each rank held half the rows; both used the single attempt id rank 0 claimed.
    assert [out.split() for out in outputs] == [["4", "1"], ["4", "1"]]

    manifest_keys = [k for k in s3_keys(s3_uri) if k.endswith("manifest.json")]
    assert manifest_keys == ["step-10/manifest.json", "step-5/manifest.json"]
    ckpt = Checkpointer(s3_uri, read_only=True)
    manifest = ckpt.candidates()[0]
    assert (manifest.step, manifest.world_size, manifest.kind) == (10, 2, "dcp")
    shard_files = {o.key.rsplit("/", 1)[1] for o in manifest.objects}
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= shard_files

    # One process, no process group: DCP reassembles the full tensor from both shards.
    state = {"model": Extras(weight=torch.zeros(8, 6)), "extras": Extras(lr=torch.tensor(0.0))}
    assert ckpt.restore(state) == 10
    assert torch.equal(state["model"]["weight"], torch.arange(48.0).reshape(8, 6))
    assert state["extras"]["lr"].item() == 0.5

    # A shard lost from the newest checkpoint: resume verifies, reports and falls back.
    Checkpointer(s3_uri).store.delete([f"step-10/{manifest.objects[0].key}"])
    reader = Checkpointer(s3_uri, read_only=True)
    assert reader.restore(state) == 5
    assert [s.step for s in reader.skipped] == [10] and "missing" in reader.skipped[0].reason
