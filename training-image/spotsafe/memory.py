"""The memory tier: every few steps, each rank's snapshot in host memory and in a peer's.

Between durable saves, which the object store's cost spaces minutes apart, every
``memory_every_steps`` steps each rank copies its state (what a durable save takes: a
replicated (DDP) state whole, a sharded one (DTensors, as FSDP and tensor parallelism keep
parameters) as this rank's local shards) into host staging buffers, the only part that holds
training. A background thread then writes it to ``memory_dir`` (a tmpfs: host memory that
outlives the process, so a worker that torchrun restarts on a surviving node still has it) and
sends it to one peer on another node, which keeps it in its own ``memory_dir``. A node that
vanishes takes its ranks' copies with it; the peer's replicas survive.

Every rank takes the same steps: at a due step the ranks agree (one all_reduce of one number,
on a gloo group of the tier's own) to skip it while any rank's previous save is still being
written or sent, so a step is taken only once the one before is whole on every node. Each copy
keeps its two newest steps, so a node always holds the previous step of every rank it keeps,
however slow a rank or a link (were each rank to decide alone, a slow rank's replicas could fall
two steps behind its peers' own copies, leaving no step held for every rank). The agreement
waits for no copy or transfer, only for every rank to reach the step, which data-parallel
training's collectives make them do anyway.

It is a cache, never the record: nothing here touches the bucket, and the durable tier's
commit, fencing and verification are unchanged. At restore every rank lists the snapshots its
node holds; one is used only if its step is newer than the newest committed checkpoint, every
rank of the same world size has one at that step (on its own node or a live peer's), and each
verifies against the CRC32C taken when it was written (a rank tries its own node's copy, then
its peers'). A sharded snapshot records each DTensor's layout (global shape, placements, mesh
shape, this rank's place in the mesh) and is used only by a state laid out alike; its shards are
copied in place into the live DTensors' local tensors. One rank short, or one rank with no copy
that verifies and fits, and every rank restores from the bucket instead.

Transport: a plain TCP connection per transfer, to a small server each rank runs on a thread.
It needs nothing from the training's process group, so it never meets NCCL's or gloo's
collectives, and it keeps serving whatever the group goes through: a gloo or NCCL group's
lifetime is tied to the failure that tears it down, exactly when a replacement needs the copy.
Peers learn each other's address through one all_gather when the Checkpointer starts, and
with it a random token of this attempt (rank 0's) that every request must carry: a pod that can
reach the port but is not one of the run's ranks can neither read a snapshot nor plant one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import mmap
import os
import secrets
import socket
import socketserver
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from spotsafe import checksum, sharded
from spotsafe import state as state_mod
from spotsafe.errors import ConfigError, CorruptCheckpointError, StateMismatchError

log = logging.getLogger("spotsafe")

KEPT = 2  # steps kept per rank: a save in progress never leaves a rank with none complete
_CHUNK = 1 << 20
# Seconds a transfer may stall before the peer is taken for gone.
PEER_TIMEOUT_S = 60


@dataclass(frozen=True)
class Held:
    """One rank's snapshot at one step, as a node holds it."""

    rank: int
    step: int
    world_size: int
    size: int
    crc32c: str

    @classmethod
    def of(cls, values: dict) -> Held:
        """From a peer's request or a description on disk, each field of its own type (a rank
        or a step names a path)."""
        return cls(*(kind(values[name]) for name, kind in _FIELDS))


_FIELDS = (("rank", int), ("step", int), ("world_size", int), ("size", int), ("crc32c", str))


class _Counted(checksum.Fingerprint):
    """A file that keeps the size and CRC32C of what is written to it."""

    def __init__(self, file: Any) -> None:
        super().__init__()
        self.file = file

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.file.write(data)
        return super().write(data)


class Shelf:
    """A node's copies of this run's snapshots: ``<dir>/<run>/rank-<r>/step-<N>.{pt,json}``.

    The data file comes first, its description (size, CRC32C) last, each by a rename: a step
    with no description is a save cut short, never read.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def held(self) -> list[Held]:
        found = []
        for meta in self.root.glob("rank-*/step-*.json"):
            try:
                found.append(Held.of(json.loads(meta.read_text())))
            except (OSError, ValueError, TypeError, KeyError):
                continue  # deleted meanwhile, or not ours: never a candidate
        return found

    def drop_partial(self, rank: int) -> None:
        """Delete a rank's files cut short by a kill mid-write or mid-receive: never read, but
        each holds up to a whole state in the node's memory."""
        for partial in (self.root / f"rank-{rank}").glob("*.tmp"):
            partial.unlink(missing_ok=True)

    def path(self, rank: int, step: int) -> Path:
        return self.root / f"rank-{rank}" / f"step-{step}.pt"

    def put(self, held: Held, write: Any) -> Held:
        """Write a snapshot with write(file) -> (size, crc32c), describe it, drop old steps."""
        path = self.path(held.rank, held.step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "wb") as file:
                size, crc = write(file)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        held = Held(held.rank, held.step, held.world_size, size, crc)
        os.replace(tmp, path)
        meta = path.with_suffix(".json")
        meta.with_suffix(".json.tmp").write_text(json.dumps(asdict(held)))
        os.replace(meta.with_suffix(".json.tmp"), meta)
        steps = sorted(int(p.stem.removeprefix("step-")) for p in path.parent.glob("step-*.json"))
        for old in steps[:-KEPT]:
            if old == held.step:  # a fetched older step is about to be loaded: keep it
                continue
            for suffix in (".json", ".pt"):  # the description first: then it is simply gone
                self.path(held.rank, old).with_suffix(suffix).unlink(missing_ok=True)
        return held


def _recv_line(conn: socket.socket) -> dict:
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte:
            raise ConnectionError("connection closed mid-header")
        line += byte
    return json.loads(line)


def _send_line(conn: socket.socket, value: dict) -> None:
    conn.sendall(json.dumps(value).encode() + b"\n")


def _recv_into(conn: socket.socket, out: Any, size: int) -> tuple[int, str]:
    """Receive exactly size bytes into out; their size and CRC32C."""
    counted, left = _Counted(out), size
    while left:
        chunk = conn.recv(min(_CHUNK, left))
        if not chunk:
            raise ConnectionError(f"connection closed with {left} of {size} bytes to come")
        counted.write(chunk)
        left -= len(chunk)
    return counted.size, counted.crc32c


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, tier: MemoryTier) -> None:
        self.tier = tier
        super().__init__(("", 0), _Handler)


class _Handler(socketserver.BaseRequestHandler):
    """A peer's replica to keep ("put"), or a kept snapshot to send ("get")."""

    def handle(self) -> None:
        tier: MemoryTier = self.server.tier
        # A peer whose node vanished sends no FIN: give up on it rather than wait for good.
        self.request.settimeout(PEER_TIMEOUT_S)
        try:
            request = _recv_line(self.request)
            if request.get("run") != tier.run:
                raise ValueError("a snapshot of another run")
            if not tier.token or not hmac.compare_digest(str(request.get("token")), tier.token):
                raise ValueError("a request without this attempt's token")
            if request["op"] == "put":
                tier.receive(self.request, request)
            else:
                tier.send(self.request, int(request["rank"]), int(request["step"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.debug("memory tier: a peer's request failed: %s", e)


class MemoryTier:
    """One rank's memory tier: its shelf, its server and its background sends."""

    def __init__(self, ckpt: Any, executor: ThreadPoolExecutor) -> None:
        import torch.distributed as dist

        config = ckpt.config
        local = ranks_per_node(ckpt.world_size, config.memory_every_steps)
        self.every = config.memory_every_steps
        self.rank, self.world_size = ckpt.rank, ckpt.world_size
        self.attempt = ckpt.attempt
        self.run = hashlib.sha256(ckpt.uri.encode()).hexdigest()[:16]
        self.shelf = Shelf(Path(config.memory_dir) / self.run)
        self.buddy = (self.rank + local) % self.world_size  # the same local rank, next node
        self._executor = executor
        self._staging: dict[str, torch.Tensor] = {}
        self._pending: Future | None = None
        self._warned = False
        self.token = ""  # none is accepted before the ranks have agreed on one
        # The tier's collectives: gloo whatever the training uses, apart from the durable
        # saves' group, whose collectives run on the save thread.
        self.group = dist.new_group(backend="gloo")
        # What a kill cut short here, in this rank's files and in those of the rank it keeps
        # replicas for, before anything is written there again.
        self.shelf.drop_partial(self.rank)
        self.shelf.drop_partial((self.rank - local) % self.world_size)
        self._server = _Server(self)
        threading.Thread(
            target=self._server.serve_forever, name="spotsafe-memory-server", daemon=True
        ).start()
        me = (_reachable_host(), self._server.server_address[1], secrets.token_hex(16))
        gathered: list[tuple[str, int, str]] = [me] * self.world_size
        dist.all_gather_object(gathered, me, group=self.group)  # every rank's, in rank order
        self.addresses = [(host, port) for host, port, _ in gathered]
        self.token = gathered[0][2]

    # ---- save --------------------------------------------------------------------------------

    def maybe_save(self, step: int, state: Mapping[str, Any]) -> bool:
        """Snapshot now when the step is due and every rank's previous save is done; keep it
        and send it to the peer in the background. A due step is skipped, on every rank alike,
        while any rank's previous one is in flight: a cache never holds training. Every rank
        calls it at the same steps, as sharded saves need: a due step's agreement is a
        collective. True when a save started."""
        if step % self.every:
            return False
        busy = torch.tensor([int(self._pending is not None and not self._pending.done())])
        torch.distributed.all_reduce(busy, op=torch.distributed.ReduceOp.MAX, group=self.group)
        if busy.item():
            log.debug("memory checkpoint at step %d skipped: a save is still in flight", step)
            return False
        shards: dict[str, Any] = {}
        dicts = {key: state_mod.local_shards(obj.state_dict(), key, shards)
                 for key, obj in sharded.dcp_entries(state).items()}  # fmt: skip
        layouts = {path: _layout(tensor) for path, tensor in shards.items()}
        snap = {"state": state_mod.stage(dicts, self._staging), "layouts": layouts}
        self._pending = self._executor.submit(self._keep, step, snap)
        return True

    def _keep(self, step: int, snap: dict[str, Any]) -> None:
        try:
            held = self.shelf.put(Held(self.rank, step, self.world_size, 0, ""), _saving(snap))
            self._push(held)
        except Exception as e:  # noqa: BLE001 - a cache that fails never stops training
            if not self._warned:  # said once: the tier is a cache, the bucket still holds
                self._warned = True
                log.warning("memory checkpoint at step %d not kept on its peer: %s", step, e)

    def _push(self, held: Held) -> None:
        with (
            socket.create_connection(self.addresses[self.buddy], timeout=PEER_TIMEOUT_S) as conn,
            open(self.shelf.path(held.rank, held.step), "rb") as file,
        ):
            _send_line(
                conn,
                {
                    "op": "put",
                    "run": self.run,
                    "token": self.token,
                    "attempt": self.attempt,
                    **asdict(held),
                },
            )
            conn.sendfile(file)
            reply = _recv_line(conn)
        if "error" in reply:
            raise ValueError(reply["error"])

    def receive(self, conn: socket.socket, request: dict) -> None:
        """Keep a peer's snapshot once it arrived whole and its CRC32C verified."""
        held = Held.of(request)
        if request["attempt"] != self.attempt:
            _send_line(conn, {"error": f"attempt {request['attempt']} is not this one's"})
            return
        try:
            self.shelf.put(held, _receiving(conn, held))
        except ValueError as e:
            _send_line(conn, {"error": str(e)})
            return
        _send_line(conn, {"ok": True})

    def send(self, conn: socket.socket, rank: int, step: int) -> None:
        with open(self.shelf.path(rank, step), "rb") as file:
            conn.sendfile(file)

    # ---- restore -----------------------------------------------------------------------------

    def restore(self, state: Mapping[str, Any], newest_durable: int | None) -> int | None:
        """Load the newest snapshot every rank can get that is newer than newest_durable, and
        its step; None (on every rank alike) when there is none or one rank's copy fails."""
        import torch.distributed as dist

        listings: list[list[Held]] = [[]] * self.world_size
        dist.all_gather_object(listings, self.shelf.held(), group=self.group)
        holders: dict[tuple[int, int], dict[int, Held]] = {}
        for node, listing in enumerate(listings):
            for held in listing:
                if held.world_size == self.world_size:
                    holders.setdefault((held.rank, held.step), {})[node] = held
        steps = {step for _, step in holders}
        usable = [
            s
            for s in steps
            if s > (newest_durable or 0) and all((r, s) in holders for r in range(self.world_size))
        ]
        if not usable:
            return None
        step = max(usable)
        payload, problem = None, ""
        try:
            payload = self._fetch(holders[(self.rank, step)], step)
            problem = _layout_mismatch(payload["layouts"], state)
        except Exception as e:  # noqa: BLE001 - one rank's failure is every rank's, agreed below
            problem = str(e) or type(e).__name__
        failed = torch.tensor([1 if problem else 0])
        dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=self.group)
        if failed.item():
            log.warning(
                "memory checkpoint at step %d refused (%s); restoring from the bucket",
                step,
                problem or "another rank's copy failed",
            )
            return None
        where = f"the memory tier's step {step} of rank {self.rank}"
        entries = sharded.dcp_entries(state)
        live: dict[str, Any] = {}  # the live DTensors by path
        for key, obj in entries.items():
            state_mod.local_shards(obj.state_dict(), key, live)
        placed = _placer(live, payload["layouts"], where)
        saved = {key: state_mod.rebuilt(value, key, placed)
                 for key, value in payload["state"].items()}  # fmt: skip
        state_mod.load(entries, saved, where)
        return step

    def _fetch(self, copies: dict[int, Held], step: int) -> Any:
        """This rank's snapshot: from its own node when it holds one, else from a peer into
        this node's memory; each copy verified against the CRC32C taken when it was written."""
        path = self.shelf.path(self.rank, step)
        problems = []
        for node in sorted(copies, key=lambda node: node != self.rank):
            held = copies[node]
            host, port = self.addresses[node]
            where = "this node" if node == self.rank else f"rank {node} at {host}:{port}"
            try:
                if node == self.rank:
                    if _described(path) != (held.size, held.crc32c):
                        raise ValueError(f"step {step} does not match its CRC32C")
                else:
                    log.info("fetching rank %d's step %d from %s", self.rank, step, where)
                    with socket.create_connection(
                        self.addresses[node], timeout=PEER_TIMEOUT_S
                    ) as conn:
                        request = {
                            "op": "get",
                            "run": self.run,
                            "token": self.token,
                            "rank": self.rank,
                            "step": step,
                        }
                        _send_line(conn, request)
                        self.shelf.put(held, _receiving(conn, held))
                # Mapped privately, not read: the load copies each tensor at most once, and
                # the training's in-place updates never reach the file.
                payload = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
            except Exception as e:  # noqa: BLE001 - any copy that cannot be read is refused
                problems.append(f"{where}: {e}")
                continue
            log.info("memory checkpoint of rank %d at step %d from %s", self.rank, step, where)
            return payload
        raise CorruptCheckpointError("; ".join(problems))

    def wait(self) -> None:
        """Until the save in flight, if any, is kept here and on the peer (or has failed)."""
        if self._pending is not None:
            self._pending.result()

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._server.shutdown()
        self._server.server_close()


def _receiving(conn: socket.socket, held: Held) -> Any:
    """How a snapshot arriving on conn is written to a file: received, counted, and refused
    unless it matches its CRC32C."""

    def write(file: Any) -> tuple[int, str]:
        size, crc = _recv_into(conn, file, held.size)
        if crc != held.crc32c:
            raise ValueError(f"rank {held.rank}'s step {held.step} does not match its CRC32C")
        return size, crc

    return write


def _described(path: Path) -> tuple[int, str]:
    """A file's size and CRC32C, read through a mapping of it."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return len(data), checksum.crc32c(data)


def ranks_per_node(world_size: int, every: int) -> int:
    """This node's ranks (torchrun's LOCAL_WORLD_SIZE); refused when they are the whole run."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if world_size <= local:
        raise ConfigError(
            f"memory_every_steps={every} keeps each snapshot on a peer on another node, and "
            f"this run has one node ({world_size} rank(s)); unset SPOTSAFE_MEMORY_EVERY_STEPS"
        )
    return local


def _layout(tensor: Any) -> str:
    """What places a DTensor's local shard: global shape, placements, mesh, place in the mesh."""
    mesh = tensor.device_mesh
    return (f"{list(tensor.shape)} as {list(tensor.placements)} over a mesh of "
            f"{list(mesh.shape)} at {list(mesh.get_coordinate() or ())}")  # fmt: skip


def _layout_mismatch(saved: dict[str, str], state: Mapping[str, Any]) -> str:
    """How a snapshot's DTensor layouts differ from the live state's; empty when they match.
    Optimizers are left out: their state is laid out as their parameters are, and reading a
    fresh one's state dict initialises it, so it is read only once the ranks have agreed."""
    shards: dict[str, Any] = {}
    keys = set()
    for key, obj in state_mod.stateful_items(state).items():
        if not isinstance(obj, torch.optim.Optimizer):
            keys.add(key)
            state_mod.local_shards(obj.state_dict(), key, shards)
    live = {path: _layout(tensor) for path, tensor in shards.items()}
    saved = {path: layout for path, layout in saved.items() if path.split("/")[0] in keys}
    for path in sorted(saved.keys() | live.keys()):
        if saved.get(path) != live.get(path):
            return (f"it holds {path} {saved.get(path, 'unsharded')}, this run "
                    f"{live.get(path, 'unsharded')}")  # fmt: skip
    return ""


def _placer(live: dict[str, Any], layouts: dict[str, str], where: str) -> Any:
    """How a snapshot's value at a path is placed: a local shard copied, in place, into the live
    DTensor at its path, which stands in its place; any other value as it is."""

    def placed(saved: Any, path: str) -> Any:
        if path not in layouts:
            return saved
        target = live.get(path)
        if target is None or _layout(target) != layouts[path]:
            raise StateMismatchError(
                f"checkpoint {where} holds {path} {layouts[path]}, which does not fit the state "
                "to restore into"
            )
        with torch.no_grad():  # a parameter's shard too
            target.to_local().copy_(saved)
        return target

    return placed


def _saving(snap: dict[str, Any]) -> Any:
    """How a snapshot is written to a file: torch.save, counted."""

    def write(file: Any) -> tuple[int, str]:
        counted = _Counted(file)
        torch.save(snap, counted)
        return counted.size, counted.crc32c

    return write


def _reachable_host() -> str:
    """This host's address on the route to the rendezvous master: one its peers reach."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
        return probe.getsockname()[0]
