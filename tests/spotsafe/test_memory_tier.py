"""The memory tier between durable saves: two ranks as local processes standing for two nodes,
each node's host memory a directory of its own, real SIGKILLs. A lost node's directory goes with
it; a restarted rank restores from its peer's copy (replicated or FSDP-sharded, and however far
one rank's saves lag), a corrupt copy, a lost pair or a snapshot of another layout falls back
to the bucket, and the weights always end bitwise equal to an uninterrupted run."""

from __future__ import annotations

import functools
import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from spotsafe import CheckpointConfig, Checkpointer
from spotsafe.bench.nodes import Nodes
from spotsafe.errors import ConfigError
from spotsafe_harness import run_ranks

TRAIN = "import sys; from spotsafe.examples.train import main; sys.exit(main())"
DURABLE_EVERY = 10


# Steps paced so a kill lands within a step of the moment the test sees (unpaced, an idle machine
# trains several steps, past the next save, meanwhile).
STEP_S = {"small": 0.02, "medium": 0.5}


def two_nodes(
    root: Path, steps: int, size: str = "small", every: int = 5, fsdp: bool = False
) -> Nodes:
    memory = [root / "node0", root / "node1"]
    paced = ["--step-s", str(STEP_S[size])]
    return Nodes(f"file://{root}/bucket", memory, [*_args(steps, size, fsdp), *paced], every)


def _args(steps: int, size: str, fsdp: bool = False) -> list[str]:
    return ["--steps", str(steps), "--size", size, "--every-steps", str(DURABLE_EVERY),
            "--seed", "5", *(["--fsdp"] if fsdp else [])]  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    """Weights of the same two-rank run with no interruption and no memory tier."""

    @functools.cache
    def weights(steps: int, size: str, fsdp: bool = False) -> str:
        uri = f"file://{tmp_path_factory.mktemp('uninterrupted')}"
        ranks = run_ranks(TRAIN, *_args(steps, size, fsdp), "--checkpoint-uri", uri)
        assert [r.returncode for r in ranks] == [0, 0], ranks[1].stderr[-3000:]
        return json.loads(ranks[0].stdout.splitlines()[-1])["weights_sha256"]

    return weights


def test_a_lost_node_then_a_lost_pair_then_a_corrupt_copy(
    tmp_path: Path, uninterrupted: Callable[..., str]
) -> None:
    nodes = two_nodes(tmp_path, 70)

    # 1. Node 1 vanishes: its rank restarts on a new node and fetches its snapshot from node 0,
    #    which kept it; node 0's rank reads its own. At most MEMORY_EVERY steps are lost.
    nodes.start()
    nodes.wait(nodes.holds(15, 10))
    nodes.kill(1)
    nodes.lose_memory(1)
    kept, durable, reached = max(nodes.all_held(0)), nodes.committed(), nodes.reached()
    assert kept > durable
    nodes.start()
    nodes.wait(nodes.holds(35, 30))
    # 2. Both nodes vanish at once: the bucket's newest checkpoint, as the durable interval says.
    nodes.kill(0, 1)
    assert [nodes.resumed_from(rank) for rank in (0, 1)] == [(kept, "memory")] * 2
    assert f"fetching rank 1's step {kept} from rank 0" in nodes.log(1)
    assert reached - kept <= nodes.every
    nodes.lose_memory(0, 1)
    durable, reached = nodes.committed(), nodes.reached()
    nodes.start()
    nodes.wait(nodes.holds(55, 50))
    # 3. Node 1 vanishes and node 0's copy of rank 1's snapshot is corrupt: refused, the bucket.
    nodes.kill(1)
    assert [nodes.resumed_from(rank) for rank in (0, 1)] == [(durable, "bucket")] * 2
    assert reached - durable <= DURABLE_EVERY
    nodes.lose_memory(1)
    kept, durable = max(nodes.all_held(0)), nodes.committed()
    copy = next(nodes.memory[0].glob(f"*/rank-1/step-{kept}.pt"))
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(data)
    nodes.start()
    result = json.loads(nodes.finish())
    assert [nodes.resumed_from(rank) for rank in (0, 1)] == [(durable, "bucket")] * 2
    assert f"memory checkpoint at step {kept} refused" in nodes.log(1)
    assert "does not match its CRC32C" in nodes.log(1)
    assert result["final_step"] == 70
    assert result["weights_sha256"] == uninterrupted(70, "small")


def test_kills_during_a_memory_save_and_during_a_peer_restore(
    tmp_path: Path, uninterrupted: Callable[..., str]
) -> None:
    nodes = two_nodes(tmp_path, 8, size="medium", every=2)  # ~107 MB a rank: transfers take a while

    # 1. Node 1 vanishes while its rank sends a snapshot to node 0: that step never counts.
    nodes.start()
    partials: list[Path] = []

    def mid_send() -> bool:  # the partial file as seen, not looked up again once it is renamed
        found = nodes.memory[0].glob("*/rank-1/step-*.tmp")
        partials[:] = [p for p in found if not p.name.endswith(".json.tmp")]  # the data file
        return bool(nodes.all_held(0)) and bool(partials)

    nodes.wait(mid_send)
    partial = max(partials, key=lambda p: int(p.stem[5:]))  # the step being sent now
    nodes.kill(1)
    nodes.lose_memory(1)
    assert not partial.exists(), "node 0 kept a partial copy"
    assert int(partial.stem[5:]) not in nodes.held(0, 1)
    kept = max(nodes.all_held(0))

    # 2. Its replacement is killed while it fetches its snapshot from node 0.
    nodes.start()
    nodes.wait(lambda: "fetching rank 1's step" in nodes.log(1))
    nodes.kill(1)
    assert f"fetching rank 1's step {kept} from rank 0" in nodes.log(1)
    assert nodes.resumed_from(1) is None, "the kill landed after the restore"

    # 3. The next replacement fetches it whole; node 0's copy served every attempt.
    nodes.start()
    result = json.loads(nodes.finish())
    assert [nodes.resumed_from(rank) for rank in (0, 1)] == [(kept, "memory")] * 2
    assert result["final_step"] == 8
    assert result["weights_sha256"] == uninterrupted(8, "medium")


def test_a_bad_cadence_and_a_run_of_one_node_are_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTSAFE_MEMORY_EVERY_STEPS", "often")
    with pytest.raises(ConfigError, match=r"^SPOTSAFE_MEMORY_EVERY_STEPS='often' must be a whole"):
        CheckpointConfig()
    monkeypatch.setenv("SPOTSAFE_MEMORY_EVERY_STEPS", "5")
    with pytest.raises(ConfigError, match=r"peer on another node, and this run has one node"):
        Checkpointer(f"file://{tmp_path}", memory_dir=str(tmp_path / "memory"))
    assert list(tmp_path.iterdir()) == [], "refused only after writing"


def test_an_fsdp_run_loses_a_node_and_restores_its_shards_from_the_peer(
    tmp_path: Path, uninterrupted: Callable[..., str]
) -> None:
    nodes = two_nodes(tmp_path, 30, fsdp=True)  # each rank holds half of every layer
    nodes.start()
    nodes.wait(nodes.holds(15, 10))
    nodes.kill(1)
    nodes.lose_memory(1)
    kept, reached = max(nodes.all_held(0)), nodes.reached()
    assert kept > nodes.committed()
    nodes.start()
    result = json.loads(nodes.finish())
    assert [nodes.resumed_from(rank) for rank in (0, 1)] == [(kept, "memory")] * 2
    assert f"fetching rank 1's step {kept} from rank 0" in nodes.log(1)
    assert reached - kept <= nodes.every
    assert result["final_step"] == 30
    assert result["weights_sha256"] == uninterrupted(30, "small", fsdp=True)


# A row-sharded DTensor saved to the memory tier, then restored into a state laid out by
# columns (refused: the bucket, which holds nothing) and into one laid out alike (used).
LAYOUTS = textwrap.dedent(
    """
    import logging, sys, torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from spotsafe import Checkpointer, Extras

    logging.basicConfig()
    logging.getLogger("spotsafe").setLevel(logging.INFO)
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    memory = f"{sys.argv[2]}/node{dist.get_rank()}"
    full = torch.arange(48, dtype=torch.float32).reshape(8, 6)

    def restored(weight):
        ckpt = Checkpointer(sys.argv[1], memory_every_steps=1, memory_dir=memory)
        step = ckpt.restore({"model": Extras(weight=weight)})
        ckpt.close()
        return step

    ckpt = Checkpointer(sys.argv[1], memory_every_steps=1, memory_dir=memory)
    ckpt.maybe_save(1, {"model": Extras(weight=distribute_tensor(full, mesh, [Shard(0)]))})
    ckpt.close()
    by_columns = distribute_tensor(torch.zeros(8, 6), mesh, [Shard(1)])
    by_rows = distribute_tensor(torch.zeros(8, 6), mesh, [Shard(0)])
    print(restored(by_columns), restored(by_rows), by_rows.full_tensor().equal(full), flush=True)
    """
)


def test_a_snapshot_of_another_layout_is_not_used(tmp_path: Path) -> None:
    ranks = run_ranks(LAYOUTS, f"file://{tmp_path}/bucket", str(tmp_path))
    assert [r.stdout.split() for r in ranks] == [["None", "1", "True"]] * 2, ranks[0].stderr
    assert (
        "memory checkpoint at step 1 refused (it holds model/weight [8, 6] as [Shard(dim=0)] "
        "over a mesh of [2] at [0], this run [8, 6] as [Shard(dim=1)] over a mesh of [2] at [0])"
    ) in ranks[0].stderr


# Rank 1's state is 4 million times rank 0's, so its saves and sends take the longest. The run
# stops once rank 0 has taken two memory steps since rank 1's newest, the lag that left no step
# on node 0 held for both ranks while each rank took due steps on its own; or after 30 steps.
# Then node 1 is lost (its memory gone) and both ranks restore.
LAGGING = textwrap.dedent(
    """
    import logging, shutil, sys, time, torch
    import torch.distributed as dist
    from spotsafe import Checkpointer, Extras

    logging.basicConfig()
    logging.getLogger("spotsafe").setLevel(logging.INFO)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    memory = f"{sys.argv[2]}/node{rank}"
    ballast = torch.zeros(8_000_000 if rank == 1 else 2)
    state = {"model": Extras(step=torch.tensor(0), ballast=ballast)}
    ckpt = Checkpointer(sys.argv[1], memory_every_steps=1, memory_dir=memory)
    taken = []
    for step in range(1, 31):
        state["model"]["step"].fill_(step)
        if ckpt.maybe_save(step, state):
            taken.append(step)
        newest = [[], []]
        dist.all_gather_object(newest, taken[-2:])  # in step, as training's collectives keep it
        # Where ranks took steps apart, rank 0's two newest would pass rank 1's: stop there, the
        # moment a node loss found no step both hold. Agreed steps never get there.
        if len(newest[0]) == 2 and newest[1] and newest[0][0] > newest[1][-1]:
            break
        time.sleep(0.01)
    ckpt.close()
    dist.barrier()
    if rank == 1:
        shutil.rmtree(memory)
    state = {"model": Extras(step=torch.tensor(0), ballast=torch.zeros(0))}
    ckpt = Checkpointer(sys.argv[1], memory_every_steps=1, memory_dir=memory)
    print(ckpt.restore(state), int(state["model"]["step"]), flush=True)
    ckpt.close()
    """
)


def test_a_rank_whose_saves_lag_still_restores_from_memory_after_a_node_loss(
    tmp_path: Path,
) -> None:
    ranks = run_ranks(LAGGING, f"file://{tmp_path}/bucket", str(tmp_path))
    steps = [r.stdout.split() for r in ranks]
    assert steps[0] == steps[1] and steps[0][0] == steps[0][1] != "None", ranks[1].stderr
    assert f"fetching rank 1's step {steps[0][0]} from rank 0" in ranks[1].stderr
