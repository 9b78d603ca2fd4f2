"""The interface every store implements, and what a listing returns. The backends import it
from here; the package's ``open_store`` picks a backend by the URI's scheme."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from spotsafe.storage.parts import PartWriter, Written


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


class ObjectStore(Protocol):
    uri: str

    def put(self, key: str, data: bytes | bytearray | memoryview) -> Written:
        """Write (or overwrite) one object."""

    def writer(self, key: str, size_hint: int = 0) -> PartWriter:
        """A stream into one object, stored when the ``with`` block around it ends."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create one object only if no object has that key; False if one already does. True
        also when the object is this call's own (a retry whose first try's answer was lost)."""

    def get(self, key: str) -> bytes:
        """Read one whole object."""

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with prefix."""

    def delete(self, keys: list[str]) -> None:
        """Delete objects; keys that do not exist are ignored."""
