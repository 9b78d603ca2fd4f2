"""Loader worker processes that outlive a termination signal sent to their process group.

torchrun's agent (os.killpg), ``tini -g`` and dumb-init send SIGTERM (SIGINT on Ctrl-C) to the
rank's whole process group, the data loader's worker processes included. A worker that dies of
it makes torch raise "DataLoader worker (pid N) is killed by signal: Terminated" in the rank,
mid-step, before the step boundary where the rank takes the notice and makes its final save.
The signal is the rank's to act on; its workers must keep serving batches until the rank stops.

How, of the ways there are:
- Ignoring the signals (SIG_IGN) would also ignore the rank's own SIGTERM, which the loader
  sends a worker that does not stop when asked and multiprocessing sends every worker at the
  interpreter's exit before it joins them: the rank's exit would then wait on them for good.
- A process group of their own would keep them from the group's SIGKILL too (torchrun's agent
  after its grace period), and they would outlive the rank until their watchdog looks.
- So each worker blocks SIGTERM and SIGINT and takes them in a thread with sigwaitinfo, which
  names the sender: the rank's own ends the worker as torch's handler does (exit 0), anyone
  else's is dropped. SIGKILL still kills the workers; a worker whose rank is gone stops by
  torch's watchdog as before.

A signal that comes while a worker starts, before the shield is up, must not kill it either:
the rank holds both signals in the thread that starts the workers (``held``): a forked or
spawned worker inherits that mask, and the signal waits in it until the shield takes it. The
rank itself still gets its own: another of its threads takes it, or it comes once released.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

SHIELDED = frozenset({signal.SIGTERM, signal.SIGINT})


class ShieldedInit:
    """A loader's worker_init_fn: the shield first, then the user's own (picklable, for loaders
    that spawn their workers)."""

    def __init__(self, user_init_fn: Callable[[int], Any] | None) -> None:
        self.user_init_fn = user_init_fn

    def __call__(self, worker_id: int) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, SHIELDED)
        rank = multiprocessing.parent_process().pid  # the process that started this worker
        taker = threading.Thread(target=_take_signals, args=(rank,), daemon=True)
        taker.start()
        if self.user_init_fn is not None:
            self.user_init_fn(worker_id)


def _take_signals(rank: int) -> None:
    while True:
        if signal.sigwaitinfo(SHIELDED).si_pid == rank:
            os._exit(0)  # what torch's worker handler does with its loader's SIGTERM


def shield(loader: Any) -> None:
    """Make the loader's worker processes leave SIGTERM and SIGINT to the rank (see above)."""
    if not hasattr(signal, "sigwaitinfo"):  # macOS: the workers keep torch's own handling
        return
    if getattr(loader, "num_workers", 0) and not isinstance(loader.worker_init_fn, ShieldedInit):
        loader.worker_init_fn = ShieldedInit(loader.worker_init_fn)


@contextlib.contextmanager
def held(loader: Any) -> Iterator[None]:
    """Hold SIGTERM and SIGINT in this thread while it starts a shielded loader's workers (a
    worker without the shield would hold them for good)."""
    if not isinstance(getattr(loader, "worker_init_fn", None), ShieldedInit):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SHIELDED)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
