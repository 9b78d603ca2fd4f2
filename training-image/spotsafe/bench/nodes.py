"""Ranks of one run as local processes standing for nodes, each node's host memory a directory
of its own, for the memory tier's tests, benchmark and drill.

Rank r of the example trainer (or of another module taking --checkpoint-uri) runs on node r as
torchrun would start it (a gloo rank per node); a node's memory directory is its
``SPOTSAFE_MEMORY_DIR``. Losing a node is a SIGKILL to its rank and the removal of its
directory; the other ranks fail on the lost peer, as a torchrun agent's workers do before it
restarts them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spotsafe import goodput
from spotsafe.local.servers import free_port
from spotsafe.manifest import step_of
from spotsafe.storage import open_store

_RESUMED = re.compile(r"resumed from step (\d+) \((the memory tier|[^)]*)")
TRAINER = "spotsafe.examples.train"


@dataclass(frozen=True)
class Loss:
    """Nodes lost at once, and how the run came back."""

    nodes: tuple[int, ...]
    reached: int
    """The furthest step on record when they went."""
    durable: int
    """The newest committed checkpoint's step then; 0 when none."""
    kept: int
    """The newest step of which a surviving node held every rank's snapshot; 0 when none."""
    resumed_from: int
    source: str
    """Where the run resumed from: 'memory' or 'bucket'."""

    @property
    def lost_steps(self) -> int:
        return self.reached - self.resumed_from

    @property
    def survivable(self) -> bool:
        """Whether the memory tier held a step newer than the bucket's on a surviving node."""
        return self.kept > self.durable


class Nodes:
    """A run of `len(memory)` ranks, rank r on node r, whose host memory is memory[r]."""

    def __init__(
        self,
        uri: str,
        memory: list[Path],
        args: list[str],
        memory_every: int | None,
        env: dict[str, str] | None = None,
        module: str = TRAINER,
    ) -> None:
        self.uri, self.memory, self.args, self.module = uri, memory, args, module
        self.every = memory_every
        self.env = {**os.environ, **(env or {}), "SPOTSAFE_PROGRESS_S": "0.01"}
        if memory_every:
            self.env["SPOTSAFE_MEMORY_EVERY_STEPS"] = str(memory_every)
        self.store = open_store(uri)
        self.ranks: list[subprocess.Popen] = []
        self.logs: list[list[str]] = []
        self.readers: list[threading.Thread] = []

    def start(self) -> None:
        world = len(self.memory)
        env = {**self.env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
               "WORLD_SIZE": str(world)}  # fmt: skip
        self.ranks = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    self.module,
                    *self.args,
                    "--checkpoint-uri",
                    self.uri,
                ],
                env={**env, "RANK": str(rank), "SPOTSAFE_MEMORY_DIR": str(self.memory[rank])},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for rank in range(world)
        ]
        self.logs = [[] for _ in self.ranks]
        self.readers = [
            threading.Thread(target=lambda p, log: log.extend(p.stderr), args=(proc, log))
            for proc, log in zip(self.ranks, self.logs, strict=True)
        ]
        for reader in self.readers:
            reader.start()

    def held(self, node: int, rank: int) -> set[int]:
        """Steps of rank's snapshot that node holds whole (described)."""
        return {int(p.stem[5:]) for p in self.memory[node].glob(f"*/rank-{rank}/step-*.json")}

    def all_held(self, node: int) -> set[int]:
        """Steps of which node holds every rank's snapshot."""
        return set.intersection(*(self.held(node, rank) for rank in range(len(self.memory))))

    def committed(self) -> int:
        """The newest committed checkpoint's step; 0 when none."""
        listing = self.store.list("step-")
        return max((step_of(o.key) for o in listing if o.key.endswith("/manifest.json")), default=0)

    def reached(self) -> int:
        """The furthest step on record (rank 0 records it as it trains, and when it fails)."""
        return goodput.reached_before(self.store, sys.maxsize)

    def wait(
        self, ready: Callable[[], object], timeout: float = 120, poll_s: float = 0.002
    ) -> None:
        """Until ready() is true; poll_s apart, gentler on a store that ready() reads."""
        deadline = time.monotonic() + timeout
        while not ready():
            for rank, proc in enumerate(self.ranks):
                if proc.poll() is not None:
                    raise RuntimeError(f"rank {rank} exited: {self.log(rank)[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError("the moment never came")
            time.sleep(poll_s)

    def holds(self, held: int, committed: int) -> Callable[[], bool]:
        """Whether node 0 holds every rank's snapshot of step `held` or later, and the bucket a
        checkpoint of step `committed` or later."""
        return lambda: max(self.all_held(0), default=0) >= held and self.committed() >= committed

    def kill(self, *ranks: int) -> None:
        """SIGKILL those ranks; wait until the others have failed on the lost peer."""
        for rank in ranks:
            self.ranks[rank].send_signal(signal.SIGKILL)
        for rank, proc in enumerate(self.ranks):
            proc.wait(timeout=60)
            if (proc.returncode == -signal.SIGKILL) != (rank in ranks):
                raise RuntimeError(f"rank {rank} exited {proc.returncode}: {self.log(rank)}")
        for reader in self.readers:
            reader.join()

    def lose_memory(self, *nodes: int) -> None:
        for node in nodes:
            shutil.rmtree(self.memory[node], ignore_errors=True)

    def lose(self, *nodes: int) -> Loss:
        """Those nodes vanish (their ranks killed, their memory gone) and every rank starts
        again, the lost ones on replacements, as torchrun's agents restart a run: how far the
        run had got and where it resumed from."""
        self.kill(*nodes)
        self.lose_memory(*nodes)
        alive = [node for node in range(len(self.memory)) if node not in nodes]
        kept = max((max(self.all_held(node), default=0) for node in alive), default=0)
        reached, durable = self.reached(), self.committed()
        self.start()
        self.wait(lambda: self.resumed_from(0))
        return Loss(tuple(nodes), reached, durable, kept, *self.resumed_from(0))

    def finish(self) -> str:
        """Every rank trains to the end; rank 0's last stdout line."""
        out = self.ranks[0].stdout.read()  # stderr is the readers'
        for rank, proc in enumerate(self.ranks):
            if proc.wait(timeout=60):
                raise RuntimeError(f"rank {rank} exited {proc.returncode}: {self.log(rank)}")
        for reader in self.readers:
            reader.join()
        return out.splitlines()[-1]

    def log(self, rank: int) -> str:
        return "".join(self.logs[rank])

    def resumed_from(self, rank: int) -> tuple[int, str] | None:
        """The step the rank's latest attempt resumed from, and from where ('memory' or
        'bucket'); None before it has."""
        found = _RESUMED.findall(self.log(rank))
        if not found:
            return None
        step, where = found[-1]
        return int(step), "memory" if where == "the memory tier" else "bucket"
