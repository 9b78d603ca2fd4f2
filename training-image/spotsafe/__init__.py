"""spotsafe: the spot-safe training runtime.

Verified, fenced, asynchronous checkpoints to object storage (S3 API, GCS API, local files) with
exact resume, and a Run that drives them around a plain training loop. See
training-image/README.md for the API.
"""

from spotsafe.checkpointer import Checkpointer, Skipped
from spotsafe.config import CheckpointConfig
from spotsafe.data import WorkerRNG
from spotsafe.directory import DirectoryState
from spotsafe.errors import SpotsafeError, StepCommittedError, exit_on_error
from spotsafe.preemption import EXIT_PREEMPTED, PreemptionGuard
from spotsafe.run import Preempted, Run
from spotsafe.state import DataPosition, Extras, RNGState, Stateful

__all__ = [
    "EXIT_PREEMPTED",
    "CheckpointConfig",
    "Checkpointer",
    "DataPosition",
    "DirectoryState",
    "Extras",
    "Preempted",
    "PreemptionGuard",
    "RNGState",
    "Run",
    "Skipped",
    "SpotsafeError",
    "StepCommittedError",
    "Stateful",
    "WorkerRNG",
    "exit_on_error",
]
