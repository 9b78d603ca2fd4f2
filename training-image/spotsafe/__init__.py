"""spotsafe: the spot-safe training runtime.

Verified, fenced, asynchronous checkpoints to object storage (S3 API, GCS API, local files) with
exact resume. See training-image/README.md for the API.
"""

from spotsafe.checkpointer import Checkpointer, Skipped
from spotsafe.config import CheckpointConfig
from spotsafe.directory import DirectoryState
from spotsafe.errors import SpotsafeError
from spotsafe.state import DataPosition, Extras, RNGState, Stateful

__all__ = [
    "CheckpointConfig",
    "Checkpointer",
    "DataPosition",
    "DirectoryState",
    "Extras",
    "RNGState",
    "Skipped",
    "SpotsafeError",
    "Stateful",
]
