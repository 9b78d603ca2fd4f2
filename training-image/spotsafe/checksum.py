"""CRC32C: the checksum S3 and GCS validate on upload and spotsafe verifies again on restore.

Values travel as the storage services show them: base64 of the big-endian 32-bit value.
"""

from __future__ import annotations

import base64

import google_crc32c
import numpy as np


def extend(crc: int, data: bytes | bytearray | memoryview) -> int:
    """crc carried on over data. google_crc32c reads only buffers it need not release (bytes);
    a NumPy view passes any buffer through without a copy."""
    return google_crc32c.extend(crc, np.frombuffer(data, np.uint8))


def encode(crc: int) -> str:
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def crc32c(data: bytes | bytearray | memoryview) -> str:
    return encode(extend(0, data))


class Fingerprint:
    """A write-only stream that keeps only the size and CRC32C of what ``torch.save`` writes:
    what a save would store, measured without storing it."""

    def __init__(self) -> None:
        self.size = 0
        self._crc = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        self._crc = extend(self._crc, view)
        self.size += len(view)
        return len(view)

    def flush(self) -> None:
        """Nothing is buffered."""

    @property
    def crc32c(self) -> str:
        return encode(self._crc)
