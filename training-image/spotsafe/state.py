"""What a checkpoint holds: a dict of Stateful objects, as in torch.distributed.checkpoint.

Models, optimizers, LR schedulers and grad scalers are Stateful already. ``RNGState``,
``DataPosition`` and ``Extras`` cover the rest of an exact resume.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from spotsafe.errors import ConfigError, StateMismatchError


@runtime_checkable
class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class RNGState:
    """Python, NumPy, torch CPU and (when present) every CUDA device's generator."""

    def state_dict(self) -> dict[str, Any]:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state = {
            "python": random.getstate(),
            "numpy": {
                "kind": kind,
                "keys": torch.from_numpy(keys.astype(np.int64)),
                "pos": int(pos),
                "has_gauss": int(has_gauss),
                "cached_gaussian": float(cached),
            },
            "torch": torch.get_rng_state(),
        }
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        random.setstate(state_dict["python"])
        n = state_dict["numpy"]
        np.random.set_state(
            (
                n["kind"],
                n["keys"].numpy().astype(np.uint32),
                n["pos"],
                n["has_gauss"],
                n["cached_gaussian"],
            )
        )
        torch.set_rng_state(state_dict["torch"])
        if "cuda" in state_dict and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state_dict["cuda"])


class DataPosition:
    """Where the data stream is: epoch and index of the next sample (or batch)."""

    def __init__(self, epoch: int = 0, index: int = 0) -> None:
        self.epoch = epoch
        self.index = index

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch = int(state_dict["epoch"])
        self.index = int(state_dict["index"])


class Extras(dict):
    """User extras: plain values (numbers, strings, lists, dicts, tensors) saved as they are."""

    def state_dict(self) -> dict[str, Any]:
        return dict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.clear()
        self.update(state_dict)


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_copied(v) for v in value)
    return copy.deepcopy(value)


def _stateful_items(state: Mapping[str, Any]) -> Mapping[str, Stateful]:
    for key, obj in state.items():
        if not isinstance(obj, Stateful):
            raise ConfigError(
                f"state[{key!r}] is a {type(obj).__name__}, which has no state_dict() and "
                "load_state_dict(); wrap plain values in spotsafe.Extras"
            )
    return state


def snapshot(state: Mapping[str, Any]) -> dict[str, Any]:
    """A CPU copy of every state dict, independent of the live objects (training may go on)."""
    return {key: _copied(obj.state_dict()) for key, obj in _stateful_items(state).items()}


def load(state: Mapping[str, Any], saved: Mapping[str, Any], where: str) -> None:
    """Load saved state dicts into the live objects; StateMismatchError when they do not fit."""
    live = _stateful_items(state)
    missing, unexpected = sorted(set(live) - set(saved)), sorted(set(saved) - set(live))
    if missing or unexpected:
        raise StateMismatchError(
            f"checkpoint {where} holds entries {sorted(saved)}, but the state to restore has "
            f"{sorted(live)} (missing: {missing}, unexpected: {unexpected})"
        )
    for key, obj in live.items():
        try:
            obj.load_state_dict(saved[key])
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as e:
            raise StateMismatchError(
                f"checkpoint {where} entry {key!r} does not fit {type(obj).__name__}: {e}"
            ) from e
