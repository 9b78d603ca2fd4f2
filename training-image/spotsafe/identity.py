"""What a run was trained with that must not change between its attempts, checked at resume.

A Run saves these settings with every checkpoint and compares them before anything else is
loaded: the type and param groups of each optimizer, the type of each LR scheduler, the loader's
batch size, worker processes, sampler and dataset (its length, or its type for a stream),
the gradient accumulation, and the world size when a loader is given. A change is refused with
one line naming old and new: each of them changes which sample or which update comes next, so
the resumed run would silently differ from the run it continues.

What changes exactly: the world size of a run without a loader (DCP reshards the model and
optimizer state onto the ranks that load it). Hyperparameters inside the optimizer's and
scheduler's state (learning rate, betas) come from the checkpoint, as they were saved.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import torch

from spotsafe.errors import StateMismatchError

IDENTITY_KEY = "spotsafe_identity"
"""The run's settings in the checkpointed state (one JSON string, the same on every rank)."""


def written_without_identity(where: str) -> StateMismatchError:
    """The refusal of a checkpoint that a spotsafe from before run identities wrote: what it
    was trained with is unknown, so nothing can be checked, and its loader state has an older
    layout."""
    return StateMismatchError(
        f"checkpoint {where} was written by an older spotsafe, which saved no run settings: "
        "finish this run with the training image that wrote it, or start a new run under "
        "another checkpoint URI"
    )


class RunIdentity:
    """A Stateful entry: saves the run's settings, and refuses a resume whose settings differ."""

    def __init__(self, settings: Callable[[], dict[str, str]], where: Callable[[], str]) -> None:
        self.settings = settings
        self.where = where

    def state_dict(self) -> dict[str, Any]:
        return {"settings": json.dumps(self.settings(), sort_keys=True)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved, live = json.loads(state_dict["settings"]), self.settings()
        # A setting only one side has (an entry or a loader added or left out) is named where
        # that entry is loaded.
        changed = [name for name in saved if name in live and saved[name] != live[name]]
        if changed:
            old = ", ".join(f"{name} {saved[name]}" for name in changed)
            new = ", ".join(f"{name} {live[name]}" for name in changed)
            raise StateMismatchError(
                f"{self.where()} was trained with {old}; this run has {new}: resume with the "
                "settings it was saved with, or start a new run under another checkpoint URI"
            )


def run_settings(
    state: Mapping[str, Any], loader: Any, world_size: int, accumulate: int
) -> dict[str, str]:
    """The settings RunIdentity compares, by name, as they read in an error line."""
    settings = {}
    for key, obj in state.items():
        if isinstance(obj, torch.optim.Optimizer):
            sizes = [len(group["params"]) for group in obj.param_groups]
            settings[f"optimizer {key!r}"] = f"{type(obj).__name__} (param groups of {sizes})"
        elif isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
            settings[f"scheduler {key!r}"] = type(obj).__name__
    settings["accumulate"] = str(accumulate)
    if loader is not None:
        batch_size = getattr(loader, "batch_size", None)
        if batch_size is None:  # a batch_sampler= of the user's
            batch_size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
        settings["batch_size"] = str(batch_size)
        settings["num_workers"] = str(getattr(loader, "num_workers", 0))
        settings["sampler"] = type(getattr(loader, "sampler", None)).__name__
        settings["dataset"] = _dataset(getattr(loader, "dataset", None))
        # Each rank saves its own loader position, and a DistributedSampler splits the data by
        # the world size: another world would read other samples.
        settings["world size"] = str(world_size)
    return settings


def _dataset(dataset: Any) -> str:
    if isinstance(dataset, torch.utils.data.IterableDataset):
        return f"stream {type(dataset).__module__}.{type(dataset).__qualname__}"
    if hasattr(dataset, "__len__"):
        return f"of {len(dataset)} samples"
    return type(dataset).__name__
