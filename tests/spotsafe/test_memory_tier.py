"""The memory tier between durable saves: two ranks as local processes standing for two nodes,
each node's host memory a directory of its own, real SIGKILLs. A lost node's directory goes with
it; a restarted rank restores from its peer's copy, a corrupt copy or a lost pair falls back to
the bucket, and the weights always end bitwise equal to an uninterrupted run."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from spotsafe_harness import run_ranks, start_ranks

TRAIN = "import sys; from spotsafe.examples.train import main; sys.exit(main())"
MEMORY_EVERY, DURABLE_EVERY = 5, 10


class Nodes:
    """Two nodes training one run: rank r on node r, whose host memory is memory[r]."""

    def __init__(self, root: Path, *args: str) -> None:
        self.bucket = root / "bucket"
        self.memory = [root / "node0", root / "node1"]
        self.args = [*args, "--every-steps", str(DURABLE_EVERY), "--seed", "5"]
        self.ranks: list[subprocess.Popen] = []
        self.logs: list[str] = []

    def start(self) -> None:
        self.ranks = start_ranks(
            TRAIN,
            *self.args,
            "--checkpoint-uri",
            f"file://{self.bucket}",
            env={"SPOTSAFE_MEMORY_EVERY_STEPS": str(MEMORY_EVERY), "SPOTSAFE_PROGRESS_S": "0.01"},
            rank_env=lambda rank: {"SPOTSAFE_MEMORY_DIR": str(self.memory[rank])},
        )

    def held(self, node: int, rank: int) -> set[int]:
        """Steps of rank's snapshot that node holds whole (described)."""
        return {int(p.stem[5:]) for p in self.memory[node].glob(f"*/rank-{rank}/step-*.json")}

    def both_held(self, node: int) -> set[int]:
        return self.held(node, 0) & self.held(node, 1)

    def committed(self) -> int:
        steps = [int(p.parent.name[5:]) for p in self.bucket.glob("step-*/manifest.json")]
        return max(steps, default=0)

    def reached(self) -> int:
        """The furthest step on record (rank 0 records it as it trains, and when it fails)."""
        newest = max(self.bucket.glob("progress/*.json"))
        return json.loads(newest.read_text())["step"]

    def wait(self, held: int, committed: int, timeout: float = 60) -> None:
        """Until node 0 holds both ranks' snapshots of step `held` or later, and the bucket a
        checkpoint of step `committed` or later."""
        deadline = time.monotonic() + timeout
        while max(self.both_held(0), default=0) < held or self.committed() < committed:
            for proc in self.ranks:
                assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the moment never came"
            time.sleep(0.002)

    def kill(self, *ranks: int) -> None:
        """SIGKILL those ranks; the others fail on the lost peer, as a torchrun agent's workers
        do before it restarts them. Each rank's log is kept."""
        for rank in ranks:
            self.ranks[rank].send_signal(signal.SIGKILL)
        self.logs = []
        for rank, proc in enumerate(self.ranks):
            _, err = proc.communicate(timeout=60)
            assert (proc.returncode == -signal.SIGKILL) == (rank in ranks), err[-3000:]
            self.logs.append(err)

    def lose_memory(self, *nodes: int) -> None:
        for node in nodes:
            shutil.rmtree(self.memory[node])


def resumed_from(log: str) -> tuple[int, str]:
    """The step a rank resumed from and from where: 'memory' or 'bucket'."""
    [match] = re.findall(r"resumed from step (\d+) \((the memory tier|[^)]*)", log)
    return int(match[0]), "memory" if match[1] == "the memory tier" else "bucket"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """Weights of the same two-rank runs with no interruption and no memory tier, by length."""
    weights = {}
    for steps in (70,):
        uri = f"file://{tmp_path_factory.mktemp('uninterrupted')}"
        ranks = run_ranks(TRAIN, "--steps", str(steps), "--checkpoint-uri", uri,
                          "--every-steps", str(DURABLE_EVERY), "--seed", "5")  # fmt: skip
        assert [r.returncode for r in ranks] == [0, 0], ranks[1].stderr[-3000:]
        weights[steps] = json.loads(ranks[0].stdout.splitlines()[-1])["weights_sha256"]
    return weights


def test_a_lost_node_then_a_lost_pair_then_a_corrupt_copy(
    tmp_path: Path, uninterrupted: dict[int, str]
) -> None:
    nodes = Nodes(tmp_path, "--steps", "70")

    # 1. Node 1 vanishes: its rank restarts on a new node and fetches its snapshot from node 0,
    #    which kept it; node 0's rank reads its own. At most MEMORY_EVERY steps are lost.
    nodes.start()
    nodes.wait(held=15, committed=10)
    nodes.kill(1)
    nodes.lose_memory(1)
    kept, durable, reached = max(nodes.both_held(0)), nodes.committed(), nodes.reached()
    assert kept > durable
    nodes.start()
    nodes.wait(held=35, committed=30)
    # 2. Both nodes vanish at once: the bucket's newest checkpoint, as the durable interval says.
    nodes.kill(0, 1)
    assert [resumed_from(log) for log in nodes.logs] == [(kept, "memory")] * 2
    assert f"fetching rank 1's step {kept} from rank 0" in nodes.logs[1]
    assert reached - kept <= MEMORY_EVERY
    nodes.lose_memory(0, 1)
    durable, reached = nodes.committed(), nodes.reached()
    nodes.start()
    nodes.wait(held=55, committed=50)
    # 3. Node 1 vanishes and node 0's copy of rank 1's snapshot is corrupt: refused, the bucket.
    nodes.kill(1)
    assert [resumed_from(log) for log in nodes.logs] == [(durable, "bucket")] * 2
    assert reached - durable <= DURABLE_EVERY
    nodes.lose_memory(1)
    kept, durable = max(nodes.both_held(0)), nodes.committed()
    copy = next(nodes.memory[0].glob(f"*/rank-1/step-{kept}.pt"))
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(data)
    nodes.start()
    outputs = [proc.communicate(timeout=120) for proc in nodes.ranks]
    assert [proc.returncode for proc in nodes.ranks] == [0, 0], outputs[1][1][-3000:]
    assert [resumed_from(err) for _, err in outputs] == [(durable, "bucket")] * 2
    assert f"memory checkpoint at step {kept} refused" in outputs[1][1]
    assert "does not match its CRC32C" in outputs[1][1]
    result = json.loads(outputs[0][0].splitlines()[-1])
    assert result["final_step"] == 70
    assert result["weights_sha256"] == uninterrupted[70]
