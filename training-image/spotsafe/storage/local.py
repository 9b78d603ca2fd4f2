"""The local tier: a directory on a fast disk, with the same create-only semantics as a bucket."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from spotsafe.errors import ObjectMissingError, StoragePermissionError
from spotsafe.storage import ObjectInfo


class LocalStore:
    def __init__(self, uri: str, root: str) -> None:
        self.uri = uri
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except PermissionError as e:
            raise StoragePermissionError(f"cannot create checkpoint directory {root}: {e}") from e

    def _staged(self, key: str, data: bytes | memoryview) -> tuple[Path, Path]:
        """Write data durably beside its final path, so publishing it is one atomic step."""
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return Path(tmp), path

    def put(self, key: str, data: bytes | memoryview) -> None:
        tmp, path = self._staged(key, data)
        os.replace(tmp, path)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        tmp, path = self._staged(key, data)
        try:
            os.link(tmp, path)  # atomic and fails if path exists: a create-only commit
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
