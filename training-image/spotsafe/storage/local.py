"""The local tier: a directory on a fast disk, with the same create-only semantics as a bucket."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from spotsafe.errors import ObjectMissingError, StoragePermissionError
from spotsafe.storage.interface import ObjectInfo
from spotsafe.storage.parts import PartStore, PartWriter, Written, part_size_for


class _LocalUpload:
    """Parts append to a temporary file beside the final path; publishing it is one rename."""

    def __init__(self, root: Path, key: str) -> None:
        self.path = root / key
        self.tmp: Path | None = None

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
        self.file, self.tmp = os.fdopen(fd, "wb"), Path(tmp)

    def part(self, number: int, data: bytes | bytearray, crc: int) -> None:
        self.file.write(data)

    def durable(self) -> Path:
        """The temporary file, written through to the disk and closed."""
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return self.tmp

    def complete(self, parts: list[None], written: Written | None = None) -> None:
        os.replace(self.durable(), self.path)

    def whole(self, data: bytes | bytearray, written: Written | None = None) -> None:
        self.start()
        self.part(1, data, 0)
        self.complete([])

    def abort(self) -> None:
        if self.tmp is not None:
            self.file.close()
            self.tmp.unlink(missing_ok=True)


class LocalStore(PartStore):
    def __init__(self, uri: str, root: str) -> None:
        self.uri = uri
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except PermissionError as e:
            raise StoragePermissionError(f"cannot create checkpoint directory {root}: {e}") from e

    def writer(self, key: str, size_hint: int = 0) -> PartWriter:
        return PartWriter(_LocalUpload(self.root, key), part_size_for(size_hint), pool=None)

    def create_only(self, key: str, data: bytes) -> bool:
        upload = _LocalUpload(self.root, key)
        upload.start()
        upload.part(1, data, 0)
        tmp = upload.durable()
        try:
            os.link(tmp, upload.path)  # atomic and fails if path exists: a create-only commit
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink()

    def get(self, key: str) -> bytes:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError as e:
            raise ObjectMissingError(f"{self.uri}/{key} does not exist") from e

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        found = []
        for dirpath, _, filenames in os.walk(self.root):
            for name in filenames:
                if name.startswith(".tmp-"):
                    continue
                path = Path(dirpath) / name
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    found.append(ObjectInfo(key, path.stat().st_size))
        return found

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            path = self.root / key
            path.unlink(missing_ok=True)
            # Drop directories the delete left empty, as a bucket has no empty "folders".
            for parent in path.parents:
                if parent == self.root or any(parent.iterdir()):
                    break
                parent.rmdir()
