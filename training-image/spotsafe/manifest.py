"""The manifest: the one object whose create-only write commits a checkpoint.

Layout under the checkpoint URI::

    step-<N>/manifest.json             written last, create-only
    step-<N>/attempt-<A>/<objects>     data, keyed by the writing attempt so writers never collide
    attempts/<A>.json                  fencing leases (see fencing.py)
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass, field

from spotsafe import checksum
from spotsafe.errors import CorruptCheckpointError, ManifestFormatError

# 2: objects carry a CRC32C, the checksum the storage service checked on upload. 1 (still read):
# a sha256 per object.
FORMAT_VERSION = 2
MANIFEST_NAME = "manifest.json"
_STEP_KEY = re.compile(r"^step-(\d+)/")


def step_prefix(step: int) -> str:
    return f"step-{step}/"


def manifest_key(step: int) -> str:
    return step_prefix(step) + MANIFEST_NAME


def step_of(key: str) -> int | None:
    """The step a key belongs to, or None for keys outside any checkpoint."""
    match = _STEP_KEY.match(key)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class ObjectEntry:
    key: str  # relative to the checkpoint's step prefix
    size: int
    crc32c: str | None = None  # base64, as S3 and GCS show it
    sha256: str | None = None  # hex; format 1 only

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Manifest:
    step: int
    attempt: int
    world_size: int
    kind: str  # "torch": one torch.save object; "dcp": torch.distributed.checkpoint shards
    objects: list[ObjectEntry]
    created_at: float = field(default_factory=time.time)
    format_version: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        raw = {**asdict(self), "objects": [o.to_dict() for o in self.objects]}
        return json.dumps(raw, indent=1, sort_keys=True).encode()

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Manifest:
        try:
            raw = json.loads(data)
            version = int(raw["format_version"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptCheckpointError(f"manifest {where} is unreadable: {e}") from e
        if version > FORMAT_VERSION:
            raise ManifestFormatError(
                f"manifest {where} has format version {version}, but this spotsafe reads up to "
                f"{FORMAT_VERSION}; upgrade spotsafe in the training image before resuming"
            )
        try:
            objects = [ObjectEntry(**o) for o in raw.pop("objects")]
            return cls(objects=objects, **raw)
        except (KeyError, TypeError) as e:
            raise CorruptCheckpointError(f"manifest {where} is malformed: {e}") from e


def describes(entry: ObjectEntry, size: int, crc32c: str) -> bool:
    """Whether an object of this size and CRC32C is the very one the manifest entry lists. An
    entry of format 1 carries a sha256 only: it cannot be matched, so it never is."""
    return size == entry.size and crc32c == entry.crc32c


def verified(entry: ObjectEntry, data: bytes, where: str) -> bytes:
    """data itself if it matches the manifest's size and checksum; else CorruptCheckpointError."""
    if len(data) != entry.size:
        raise CorruptCheckpointError(
            f"{where} is {len(data)} bytes but its manifest says {entry.size} (truncated?)"
        )
    if entry.crc32c is not None:
        if checksum.crc32c(data) != entry.crc32c:
            raise CorruptCheckpointError(f"{where} fails its crc32c checksum")
    elif entry.sha256 is not None:
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise CorruptCheckpointError(f"{where} fails its sha256 checksum")
    else:
        raise CorruptCheckpointError(f"{where} has no checksum in its manifest")
    return data
