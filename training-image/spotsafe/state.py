"""What a checkpoint holds: a dict of Stateful objects, as in torch.distributed.checkpoint.

Models, optimizers, LR schedulers, grad scalers and torchdata's StatefulDataLoader are Stateful
already; a random generator object (``GENERATORS``) is saved as its state. ``RNGState``,
``DataPosition`` and ``Extras`` cover the rest of an exact resume.

Every value a save takes is one that restore can read back (``torch.load(weights_only=True)``):
anything else is refused at the save that meets it, naming where it is, never discovered when
the run tries to resume.
"""

from __future__ import annotations

import copy
import io
import random
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from spotsafe.errors import ConfigError, StateMismatchError
from spotsafe.identity import IDENTITY_KEY, written_without_identity


@runtime_checkable
class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class RNGState:
    """Python, NumPy, torch CPU and (when present and `cuda`) every CUDA device's generator."""

    def __init__(self, cuda: bool = True) -> None:
        self.cuda = cuda

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
        if self.cuda and torch.cuda.is_available():
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
        if self.cuda and "cuda" in state_dict and torch.cuda.is_available():
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
    """User extras: plain values (Python numbers, strings, lists, dicts, tensors) saved as they
    are. A value restore could not read back (a NumPy number or array, an object) is refused at
    the save."""

    def state_dict(self) -> dict[str, Any]:
        return dict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.clear()
        self.update(state_dict)


GENERATORS = (torch.Generator, np.random.Generator, np.random.RandomState, random.Random)
"""The random generator objects a script or a dataset may hold, each kept by its state."""


class GeneratorState:
    """A generator object (one of ``GENERATORS``) put in the state directly: its state is saved
    and set back."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator

    def state_dict(self) -> dict[str, Any]:
        return {"state": generator_state(self.generator)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_generator_state(self.generator, state_dict["state"])


def generator_state(generator: Any) -> Any:
    """The state of one of ``GENERATORS``, in values a weights-only load reads back (NumPy
    arrays become lists)."""
    if isinstance(generator, torch.Generator):
        return generator.get_state()
    if isinstance(generator, np.random.Generator):
        return _listed(generator.bit_generator.state)
    if isinstance(generator, np.random.RandomState):
        return _listed(generator.get_state(legacy=False))
    return generator.getstate()


def set_generator_state(generator: Any, state: Any) -> None:
    if isinstance(generator, torch.Generator):
        generator.set_state(state)
    elif isinstance(generator, np.random.Generator):
        generator.bit_generator.state = _arrays(state)
    elif isinstance(generator, np.random.RandomState):
        generator.set_state(_arrays(state))
    else:
        generator.setstate(state)


def _listed(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"ndarray": value.tolist(), "dtype": value.dtype.str}
    if isinstance(value, dict):
        return {k: _listed(v) for k, v in value.items()}
    return value


def _arrays(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"ndarray", "dtype"}:
        return np.array(value["ndarray"], dtype=value["dtype"])
    if isinstance(value, dict):
        return {k: _arrays(v) for k, v in value.items()}
    return value


def optimizers(state: Mapping[str, Any]) -> list[torch.optim.Optimizer]:
    return [obj for obj in state.values() if isinstance(obj, torch.optim.Optimizer)]


_PLAIN = (str, int, float, bool, type(None))
_restorable_types: set[type] = set(_PLAIN)  # types whose values torch.load read back


def restorable(value: Any) -> bool:
    """Whether torch.load(weights_only=True), which restore uses, reads the value back.

    Each type is tried once, by a round trip through torch.save and torch.load, so the rule is
    torch's own and a steady-state save pays one set lookup per value.
    """
    kind = type(value)
    if kind in _restorable_types:
        return True
    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception:  # noqa: BLE001 - a round trip that fails in any way is the answer
        return False
    if not isinstance(value, Collection):  # a set's next values may be of other types
        _restorable_types.add(kind)
    return True


def check_restorable(value: Any, path: str) -> None:
    """Refuse, naming where it is, a value that restore could not read back."""
    if not restorable(value):
        kind = type(value)
        raise ConfigError(
            f"state[{path.split('/')[0]!r}] holds a {kind.__module__}.{kind.__qualname__} at "
            f"{path}, which a checkpoint could save but restore could never read back; "
            + _advice(value, path.split("/")[-1])
        )


def _advice(value: Any, name: str) -> str:
    if isinstance(value, GENERATORS):
        return (
            f"put the generator in the state itself (state[{name!r}] = generator), where "
            "spotsafe saves and restores its state"
        )
    if isinstance(value, np.ndarray | np.generic):
        return "store a Python number (float(x), int(x)) or a tensor (torch.from_numpy(a))"
    return "store plain values (Python numbers, strings, lists, dicts, tensors)"


def rebuilt(value: Any, path: str, leaf: Callable[[Any, str], Any]) -> Any:
    """A (nested) state dict with its dicts, lists and tuples rebuilt and every other value,
    tensors included, replaced by leaf(value, path); a path joins keys and indices with "/"."""
    if isinstance(value, dict):
        return {k: rebuilt(v, f"{path}/{k}", leaf) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(rebuilt(v, f"{path}/{i}", leaf) for i, v in enumerate(value))
    return leaf(value, path)


def local_shards(value: Any, path: str, found: dict[str, Any]) -> Any:
    """A (nested) state dict with each DTensor (as FSDP and tensor parallelism keep parameters)
    replaced by this rank's local shard, a view and no copy; each DTensor recorded in found by
    its path."""
    from torch.distributed.tensor import DTensor

    def local(leaf: Any, at: str) -> Any:
        if not isinstance(leaf, DTensor):
            return leaf
        found[at] = leaf
        return leaf.to_local()

    return rebuilt(value, path, local)


def as_sharded(value: Any, path: str, found: Mapping[str, Any]) -> Any:
    """local_shards undone on a copy: each local shard at a path in found wrapped in that
    DTensor's spec (mesh, placements, global shape; shared, not copied). Wrapped as it is, where
    it is: DTensor.from_local would move a staged host copy back to the mesh's GPU."""
    from torch.distributed.tensor import DTensor

    def wrapped(leaf: Any, at: str) -> Any:
        return DTensor(leaf, found[at]._spec, requires_grad=False) if at in found else leaf

    return rebuilt(value, path, wrapped)


def stateful_items(state: Mapping[str, Any]) -> dict[str, Stateful]:
    """The state's entries as Stateful objects (generator objects wrapped)."""
    items = {}
    for key, obj in state.items():
        if isinstance(obj, GENERATORS):
            obj = GeneratorState(obj)
        if not isinstance(obj, Stateful):
            advice = (
                f"put plain values in an Extras: state[{key!r}] = spotsafe.Extras({key}=value)"
                if restorable(obj)
                else _advice(obj, key)
            )
            raise ConfigError(
                f"state[{key!r}] is a {type(obj).__name__}, which has no state_dict() and "
                f"load_state_dict(); {advice}"
            )
        items[key] = obj
    return items


def snapshot(
    state: Mapping[str, Any], staging: dict[str, torch.Tensor] | None = None
) -> dict[str, Any]:
    """A CPU copy of every state dict, independent of the live objects (training may go on)."""
    return stage({key: obj.state_dict() for key, obj in stateful_items(state).items()}, staging)


def stage(
    dicts: Mapping[str, Any], staging: dict[str, torch.Tensor] | None = None
) -> dict[str, Any]:
    """A CPU copy of state dicts, by key.

    Tensors are copied into the staging buffers of an earlier snapshot when their shapes still
    match, so a steady-state snapshot is one memcpy with no allocation or page faults.
    """
    staging = {} if staging is None else staging
    used: dict[str, torch.Tensor] = {}

    def copied(value: Any, path: str) -> Any:
        if not isinstance(value, torch.Tensor):
            check_restorable(value, path)
            return copy.deepcopy(value)
        buffer = staging.get(path)
        if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
            # Pinned host memory makes device-to-host copies fast and asynchronous-capable.
            buffer = torch.empty(
                value.shape, dtype=value.dtype, pin_memory=torch.cuda.is_available()
            )
        used[path] = buffer
        return buffer.copy_(value.detach())

    snap = {key: rebuilt(value, key, copied) for key, value in dicts.items()}
    staging.clear()
    staging.update(used)  # buffers of tensors that no longer exist are let go
    return snap


def nbytes(value: Any) -> int:
    """Bytes of the tensors in a (nested) snapshot."""
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(nbytes(v) for v in value)
    return 0


def load(state: Mapping[str, Any], saved: Mapping[str, Any], where: str) -> None:
    """Load saved state dicts into the live objects; StateMismatchError when they do not fit."""
    live = stateful_items(state)
    only_saved, only_live = sorted(set(saved) - set(live)), sorted(set(live) - set(saved))
    if only_live == [IDENTITY_KEY]:
        raise written_without_identity(where)
    if only_saved or only_live:
        raise StateMismatchError(
            f"checkpoint {where} holds state entries {sorted(saved)}, the state to restore into "
            f"has {sorted(live)}: only the checkpoint has {only_saved}, only the state has "
            f"{only_live}; restore into a state with the keys the run saved"
        )
    # A model that changed is named as such, before the settings it changes (its optimizer's
    # param groups) are compared where the run's identity loads.
    for key, obj in live.items():
        if isinstance(obj, torch.nn.Module) and (differs := module_mismatch(obj, saved[key])):
            raise StateMismatchError(
                f"checkpoint {where} entry {key!r} does not fit the {type(obj).__name__} to "
                f"restore into: {differs}; restore into the model the run was saved with"
            )
    for key, obj in live.items():
        try:
            obj.load_state_dict(saved[key])
        except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as e:
            raise StateMismatchError(
                f"checkpoint {where} entry {key!r} does not fit {type(obj).__name__}: "
                + " ".join(str(e).split())  # one line, whatever the library wrote
            ) from e


def module_mismatch(module: torch.nn.Module, saved: Mapping[str, Any]) -> str:
    """How a saved state dict and a module's differ, in one line; empty when they fit."""
    live = module.state_dict()
    parts = []
    if missing := [k for k in live if k not in saved]:
        parts.append(f"only the model has {missing}")
    if unexpected := [k for k in saved if k not in live]:
        parts.append(f"only the checkpoint has {unexpected}")
    shapes = [
        f"{k} {list(saved[k].shape)} in the checkpoint, {list(v.shape)} in the model"
        for k, v in live.items()
        if isinstance(v, torch.Tensor) and isinstance(saved.get(k), torch.Tensor)
        and saved[k].shape != v.shape
    ]  # fmt: skip
    if shapes:
        parts.append("shapes differ: " + ", ".join(shapes))
    return "; ".join(parts)
