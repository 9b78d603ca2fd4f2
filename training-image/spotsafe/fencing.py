"""Fencing: a superseded attempt may never commit over, or delete, the newer lineage.

Every writer claims the next attempt id by creating ``attempts/<id>.json`` create-only, so ids are
unique and increase. Before each commit and each delete a writer re-reads the attempts; if a newer
id exists it is a zombie (e.g. the pod still draining after its replacement started) and stops.
The remaining window between that check and the commit is one small request; the create-only
commit still keeps it from overwriting anything, and resume ignores a checkpoint written by an
attempt older than one that committed at a lower step (see ``Checkpointer.restore``).
"""

from __future__ import annotations

import json
import os
import socket
import time

from spotsafe.errors import SupersededError
from spotsafe.storage import ObjectStore

ATTEMPTS_PREFIX = "attempts/"


def _attempt_ids(store: ObjectStore) -> list[int]:
    ids = []
    for obj in store.list(ATTEMPTS_PREFIX):
        name = obj.key[len(ATTEMPTS_PREFIX) :].removesuffix(".json")
        if name.isdigit():
            ids.append(int(name))
    return ids


class Lease:
    """This writer's attempt id, claimed once, checked before every commit and delete."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        info = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "at": time.time()})
        attempt = max(_attempt_ids(store), default=0) + 1
        while not store.put_if_absent(f"{ATTEMPTS_PREFIX}{attempt:010d}.json", info.encode()):
            attempt += 1  # another writer took this id first
        self.attempt = attempt

    def newest(self) -> int:
        return max(_attempt_ids(self.store), default=self.attempt)

    def check(self, action: str) -> None:
        newest = self.newest()
        if newest != self.attempt:
            raise SupersededError(
                f"attempt {self.attempt} was superseded by attempt {newest} of the same run; "
                f"refusing to {action}. Stop this process: its replacement owns the run."
            )
