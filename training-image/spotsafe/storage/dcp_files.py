"""torch.distributed.checkpoint's files written straight into objects, with no local copy.

DCP's ``FileSystemWriter`` writes through a small file-system interface. Over a store, each
data file it opens is a PartWriter into the object of that name: serialisation fills parts while
earlier parts upload, and the CRC32C is carried on as the bytes pass, so a rank's shard is never
written to disk and read back. DCP writes its metadata file last, under a temporary name that
it then renames; a store has no rename, so that small file is kept in memory until
``store_kept()`` stores it under its final name, once.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import DEFAULT_SUFFIX, FileSystemBase

from spotsafe.storage.interface import ObjectStore
from spotsafe.storage.parts import Written


class ObjectFiles(FileSystemBase):
    """The files of one save, as objects under prefix in store; ``size_hint``: the bytes the
    save holds, to size the parts of its largest object."""

    def __init__(self, store: ObjectStore, prefix: str, size_hint: int) -> None:
        self.store, self.prefix, self.size_hint = store, prefix, size_hint
        self.written: dict[str, Written] = {}
        self._kept: dict[str, bytes] = {}

    @contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Iterator[io.IOBase]:
        if mode != "wb":
            raise ValueError(f"objects of a save are only written, not opened with {mode!r}")
        name = os.path.basename(path)
        if not name.endswith(DEFAULT_SUFFIX):
            kept = io.BytesIO()
            yield kept
            self._kept[name] = kept.getvalue()
            return
        with self.store.writer(self.prefix + name, self.size_hint) as out:
            yield out
        self.written[name] = out.written

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        self._kept[os.path.basename(new_path)] = self._kept.pop(os.path.basename(path))

    def store_kept(self) -> dict[str, Written]:
        """Store the files held in memory; every object of the save, as written."""
        for name, data in self._kept.items():
            self.written[name] = self.store.put(self.prefix + name, data)
        self._kept.clear()
        return self.written

    def concat_path(self, path: str | os.PathLike, suffix: str) -> str:
        return suffix

    def init_path(self, path: str | os.PathLike) -> str:
        return str(path)

    def mkdir(self, path: str | os.PathLike) -> None:
        """Nothing to make: a prefix exists once an object is under it."""

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        return False  # never picked by DCP for a path: it is handed over explicitly

    def exists(self, path: str | os.PathLike) -> bool:
        return False  # every save writes under a prefix of its own attempt

    def rm_file(self, path: str | os.PathLike) -> None:
        self._kept.pop(os.path.basename(path), None)


class ObjectWriter(FileSystemWriter):
    """DCP's FileSystemWriter over ObjectFiles: one stream per rank, nothing synced to disk."""

    def __init__(self, files: ObjectFiles) -> None:
        super().__init__(files.prefix, sync_files=False)
        self.fs = files
