"""spotsafe: the spot-safe training runtime.

Verified, fenced, asynchronous checkpoints to object storage (S3 API, GCS API, local files) with
exact resume, and a Run that drives them around a plain training loop. See
training-image/README.md for the API.

The names below load on first use (PEP 562): a module of the package that needs no torch, such
as `spotsafe.goodput` for `spotctl plan`, imports without it.
"""

from __future__ import annotations

import importlib

# Each name of the package's face, and the module that defines it.
_FACE = {
    "Checkpointer": "spotsafe.checkpointer",
    "Skipped": "spotsafe.checkpointer",
    "CheckpointConfig": "spotsafe.config",
    "WorkerRNG": "spotsafe.data",
    "DirectoryState": "spotsafe.directory",
    "SpotsafeError": "spotsafe.errors",
    "StepCommittedError": "spotsafe.errors",
    "exit_on_error": "spotsafe.errors",
    "EXIT_PREEMPTED": "spotsafe.preemption",
    "PreemptionGuard": "spotsafe.preemption",
    "Preempted": "spotsafe.run",
    "Run": "spotsafe.run",
    "DataPosition": "spotsafe.state",
    "Extras": "spotsafe.state",
    "RNGState": "spotsafe.state",
    "Stateful": "spotsafe.state",
}

__all__ = sorted(_FACE)


def __getattr__(name: str) -> object:
    if name not in _FACE:
        raise AttributeError(f"module 'spotsafe' has no attribute {name!r}")
    value = getattr(importlib.import_module(_FACE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FACE})
