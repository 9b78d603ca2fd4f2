"""Objects written as a stream of parts: bounded memory, one checksum pass, parts in parallel.

A save serialises straight into a ``PartWriter``. It copies what it is given into part buffers
of a fixed size and hands each full one to the store's upload, on a thread pool where the store
has one; at most ``in_flight`` parts are on their way at once and their buffers are reused. A
save so holds its staging copy plus ``in_flight + 1`` parts, never a second full serialised copy.
The object's CRC32C is carried on as the bytes arrive; the upload sends it for the storage
service to check, and the manifest records it for restore to check again.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import deque
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass
from typing import Any, Protocol

from spotsafe import checksum

log = logging.getLogger(__name__)
MiB = 1 << 20
PART_SIZE = 8 * MiB
MAX_PARTS = 10_000  # S3's limit for one multipart upload


@dataclass(frozen=True)
class Written:
    """An object as stored: its size and CRC32C (base64, as S3 and GCS show it)."""

    size: int
    crc32c: str


class PartUpload(Protocol):
    """One object's upload to one store; PartWriter calls either whole(), or start(), part()
    for each part and complete(); abort() after any failure."""

    def whole(self, data: bytearray, written: Written) -> None:
        """Store an object that fits in one part, in one request."""

    def start(self) -> None:
        """Begin a multi-part upload, before the first part."""

    def part(self, number: int, data: bytearray, crc: int) -> Any:
        """Send part `number` (from 1), whose CRC32C is crc; several may run at once. What it
        returns is handed to complete(), in part order."""

    def complete(self, parts: list[Any], written: Written) -> None:
        """Make the object whole from its parts."""

    def abort(self) -> None:
        """Discard what was sent; best effort, never raises."""


def part_size_for(size_hint: int) -> int:
    """PART_SIZE, or more (whole MiB) when an object of size_hint would need over MAX_PARTS."""
    return max(PART_SIZE, -(-size_hint // (MAX_PARTS * MiB)) * MiB)


class PartWriter:
    """A write-only binary stream into one object (``torch.save`` writes to it directly).

    Used as a context manager: leaving it normally completes the upload and sets ``written``;
    leaving it with an exception aborts the upload, so no partial object is ever stored.
    """

    def __init__(
        self, upload: PartUpload, part_size: int, pool: Executor | None, in_flight: int = 1
    ) -> None:
        self._upload = upload
        self._part_size = part_size
        self._pool = pool  # None: parts are sent in order, on the writing thread
        self._buffers = in_flight + 1 if pool else 1
        self._allocated = 0
        self._spare: list[bytearray] = []
        self._sending: deque[tuple[Future, bytearray]] = deque()
        self._parts: list[Any] = []  # results or futures of results, in part order
        self._started = False
        self._buffer: bytearray | None = None
        self._filled = 0
        self._crc = 0
        self._size = 0
        self.written: Written | None = None

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        count = len(view)
        self._crc = checksum.extend(self._crc, view)
        self._size += count
        while view:
            if self._buffer is None:
                self._buffer, self._filled = self._free_buffer(), 0
            n = min(len(view), self._part_size - self._filled)
            self._buffer[self._filled : self._filled + n] = view[:n]
            self._filled += n
            view = view[n:]
            if self._filled == self._part_size:
                self._send(self._buffer)
                self._buffer = None
        return count

    def flush(self) -> None:
        """Nothing to do: parts leave as they fill."""

    def tell(self) -> int:
        """Bytes written so far: where the next write lands in the object."""
        return self._size

    def close(self) -> None:
        """Nothing to do: leaving the ``with`` block stores the object (a writer that closes
        its stream when done, as DCP's does, does so inside that block)."""

    def _free_buffer(self) -> bytearray:
        if self._spare:
            return self._spare.pop()
        if self._allocated < self._buffers:
            self._allocated += 1
            return bytearray(self._part_size)
        future, buffer = self._sending.popleft()
        future.result()  # the oldest part is sent (or its failure is raised): reuse its buffer
        return buffer

    def _send(self, data: bytearray) -> None:
        if not self._started:
            self._upload.start()
            self._started = True
        number = len(self._parts) + 1
        if self._pool is None:
            self._parts.append(self._upload.part(number, data, checksum.extend(0, data)))
            self._spare.append(data)
            return
        future = self._pool.submit(
            lambda: self._upload.part(number, data, checksum.extend(0, data))
        )
        self._parts.append(future)
        self._sending.append((future, data))

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self._abort()
            return
        written = Written(self._size, checksum.encode(self._crc))
        last = self._buffer if self._buffer is not None else bytearray()
        del last[self._filled :]
        try:
            if not self._started:
                self._upload.whole(last, written)
            else:
                if last:
                    self._send(last)
                parts = [p.result() if isinstance(p, Future) else p for p in self._parts]
                self._upload.complete(parts, written)
        except BaseException:
            self._abort()
            raise
        self.written = written

    def _abort(self) -> None:
        wait([future for future, _ in self._sending])
        if self._started:
            self._upload.abort()


class PartStore(ABC):
    """A store whose objects are all written through a PartWriter of its own."""

    @abstractmethod
    def writer(self, key: str, size_hint: int = 0) -> PartWriter:
        """A stream into the object at key (size_hint: its expected size, to size parts)."""

    def put(self, key: str, data: bytes | bytearray | memoryview) -> Written:
        view = memoryview(data).cast("B")
        with self.writer(key, len(view)) as out:
            out.write(view)
        return out.written

    @abstractmethod
    def create_only(self, key: str, data: bytes) -> bool:
        """Create the object at key only if there is none; False when the store refused because
        an object exists."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        if self.create_only(key, data):
            return True
        # A client that retried this very write after its answer was lost is refused by the
        # first try: the object then holds exactly these bytes. What is written create-only
        # (manifests, leases) names its writer's attempt and time, so no other writer's is equal.
        mine = self.get(key) == data
        if mine:
            log.info("%s is this write's own: its first answer was lost, and a retry refused", key)
        return mine
