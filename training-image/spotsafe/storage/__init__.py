"""Object storage behind one small interface: S3 API, GCS API and a local file:// tier.

Keys are relative to the URI's prefix, always with ``/`` separators. ``put_if_absent`` is the
create-only write the checkpoint protocol commits with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlparse

from spotsafe.errors import InvalidURIError

URI_FORMS = "s3://bucket/prefix, gs://bucket/prefix or file:///absolute/path"


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(Protocol):
    uri: str

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Write (or overwrite) one object."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create one object only if no object has that key; False if one already does."""

    def get(self, key: str) -> bytes:
        """Read one whole object."""

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with prefix."""

    def delete(self, keys: list[str]) -> None:
        """Delete objects; keys that do not exist are ignored."""


def open_store(uri: str, *, max_attempts: int = 5, connect_timeout_s: float = 5.0) -> ObjectStore:
    """The store for a checkpoint URI; raises InvalidURIError naming what is wrong."""
    parsed = urlparse(uri)
    prefix = parsed.path.strip("/")
    if parsed.scheme in ("s3", "gs"):
        if not parsed.netloc:
            raise InvalidURIError(f"checkpoint URI {uri!r} names no bucket; expected {URI_FORMS}")
        if parsed.scheme == "s3":
            from spotsafe.storage.s3 import S3Store

            return S3Store(uri, parsed.netloc, prefix, max_attempts, connect_timeout_s)
        from spotsafe.storage.gcs import GCSStore

        return GCSStore(uri, parsed.netloc, prefix, max_attempts, connect_timeout_s)
    if parsed.scheme == "file":
        if parsed.netloc or not parsed.path.startswith("/"):
            raise InvalidURIError(
                f"checkpoint URI {uri!r} is not an absolute file URI; use file:///absolute/path"
            )
        from spotsafe.storage.local import LocalStore

        return LocalStore(uri, parsed.path)
    raise InvalidURIError(f"checkpoint URI {uri!r} is not supported; expected {URI_FORMS}")
