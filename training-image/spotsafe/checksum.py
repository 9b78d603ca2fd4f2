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
