"""A restarted pod's start-up, overlapped: the checkpoint store opens while the model is built.

Before its first step a restarted pod imports the framework, builds its model and optimizer
(torch.optim imports torch._dynamo on first use: seconds), and opens the checkpoint store: the
storage library, its client, the claim of this attempt. The store's part needs none of the
model, so it runs on a thread of its own meanwhile:

    opening = spotsafe.open_checkpointer(uri, every_steps=100)
    model, optim = build()  # the store opens meanwhile
    with spotsafe.Run(opening.result(), state) as run:
        ...

The Checkpointer is the one ``Checkpointer(uri, **options)`` builds, with the same checks: an
error in its options or its store is raised by ``result()``. Several ranks each call it at the
same point, since building it is collective there (the attempt is broadcast).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from spotsafe.checkpointer import Checkpointer


def open_checkpointer(uri: str, **options: Any) -> Future[Checkpointer]:
    """Build ``Checkpointer(uri, **options)`` on a thread of its own; its future."""
    opener = ThreadPoolExecutor(1, "spotsafe-open")
    try:
        return opener.submit(Checkpointer, uri, **options)
    finally:
        opener.shutdown(wait=False)  # the thread ends once the Checkpointer is built
