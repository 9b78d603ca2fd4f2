"""moto's S3-API server, where an upload and a ranged download cost what they cost on S3.

    python -m spotsafe.local.moto_s3 [moto.server's arguments]

Two costs are moto's alone, and at benchmark sizes they were what the benchmark measured:

- A multipart upload with a full-object CRC32C (every save's) makes moto gather a second copy
  of the whole object at CompleteMultipartUpload and hash that; without the optional
  ``crc32c`` package it even hashes it with CRC32 and stores that as the CRC32C. S3 combines
  the parts' checksums instead. That copy was most of a save's time (CompleteMultipartUpload
  of 100 MB from each of two ranks at once: 3.4 s, and 1.0 s with the builder below). Here the
  full-object CRC32C is carried over the parts as moto joins them, with google_crc32c: the
  right value, one pass.
- moto reads the whole object from its spool file for every request, so a download in ranges
  of r bytes costs size²/r (500 MB in 16 MiB ranges: 33 s; in boto3's default 8 MiB: 66 s). Here
  an object is read whole once, when first asked for, and each range is sliced from that.
"""

from __future__ import annotations

import base64
import sys
import threading

import google_crc32c
from moto.s3 import models
from moto.server import main


class _FullObjectCRC32C(models.MultipartChecksumBuilder):
    """moto's builder, except that a full-object CRC32C is carried on part by part."""

    def __init__(self, checksum_algorithm: str | None, checksum_type: str | None) -> None:
        super().__init__(checksum_algorithm, checksum_type)
        self._carried = (self.checksum_algorithm, self.checksum_type) == ("CRC32C", "FULL_OBJECT")
        self._crc = 0

    def addPart(self, part: bytes) -> None:  # noqa: N802 - moto's name
        if not self._carried:
            return super().addPart(part)
        self._crc = google_crc32c.extend(self._crc, part)
        self.part_count += 1

    def build(self) -> tuple[str, str, int] | None:
        if not self._carried:
            return super().build()
        return self.checksum_type, base64.b64encode(self._crc.to_bytes(4, "big")).decode(), 1


_spooled = models.FakeKey.value


_filling = threading.Lock()  # a download's first ranges arrive at once: one reads, all share


def _read_once(key: models.FakeKey) -> bytes:
    with _filling:
        if getattr(key, "_whole", None) is None:
            key._whole = _spooled.fget(key)
        return key._whole


def _write(key: models.FakeKey, value: bytes) -> None:
    key._whole = None
    _spooled.fset(key, value)


models.MultipartChecksumBuilder = _FullObjectCRC32C
models.FakeKey.value = property(_read_once, _write)

if __name__ == "__main__":
    main(sys.argv[1:])
