"""Exact data-loader resume, any number of times, with or without worker processes.

torchdata's StatefulDataLoader saves the sampler (shuffle order and generator) and, for each
worker process, the state of the dataset it holds. Four things it leaves out are kept here:

- the random generators of the dataset: a worker's global ones (seeded afresh when a resumed
  loader starts its workers) and the generator objects the dataset holds (``WorkerRNG``);
- the generators the loader draws from as an epoch starts (``LoaderGenerator``): a stateless
  sampler (``WeightedRandomSampler``, ``SubsetRandomSampler``) draws its whole order again on
  resume, which must come from the states they had when the saved epoch started;
- the position of a stream without ``state_dict()`` (``LoaderPosition``): torchdata replays
  the batches taken before the save and counts them again on top of the restored count, so
  its own count runs ahead after every resume;
- what the run can see is not kept (``unkept_randomness``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

from torch.utils.data import Dataset, IterableDataset, get_worker_info
from torchdata.stateful_dataloader.stateful_dataloader import (
    _StatefulMultiProcessingDataLoaderIter as _Workers,
)
from torchdata.stateful_dataloader.stateful_dataloader import (
    _StatefulSingleProcessDataLoaderIter as _SingleProcess,
)

from spotsafe.errors import ConfigError
from spotsafe.state import (
    GENERATORS,
    RNGState,
    Stateful,
    generator_state,
    set_generator_state,
)

log = logging.getLogger("spotsafe")


def held_generators(obj: Any, prefix: str) -> dict[str, Any]:
    """The generator objects (``GENERATORS``) an object holds as attributes, by path."""
    held = vars(obj).items() if hasattr(obj, "__dict__") else ()
    return {f"{prefix}.{name}": value for name, value in held if isinstance(value, GENERATORS)}


def dataset_generators(dataset: Any) -> dict[str, Any]:
    """The generator objects a dataset holds, and those of the datasets it wraps (``.dataset``,
    as ``Subset`` and ``WorkerRNG`` do)."""
    found, path = {}, "dataset"
    for _ in range(8):  # a chain of wrappers, never a cycle
        if dataset is None:
            break
        found |= held_generators(dataset, path)
        dataset, path = getattr(dataset, "dataset", None), f"{path}.dataset"
    return found


class _KeptGenerators:
    """Saves, with the dataset's state, the generator objects the dataset holds and, inside a
    loader's worker process, that worker's global generators (in the main process the run
    keeps those itself)."""

    dataset: Any

    def _generators(self) -> dict[str, Any]:
        in_worker = get_worker_info() is not None
        return {
            "rng": RNGState(cuda=False).state_dict() if in_worker else None,
            "held": {k: generator_state(g) for k, g in dataset_generators(self.dataset).items()},
        }

    def _set_generators(self, saved: dict[str, Any]) -> None:
        if saved.get("rng") is not None:
            RNGState(cuda=False).load_state_dict(saved["rng"])
        held = dataset_generators(self.dataset)
        for key, state in saved.get("held", {}).items():
            set_generator_state(held[key], state)


class WorkerRNG(_KeptGenerators, Dataset):
    """A dataset whose state is its random generators: in each of a loader's worker processes
    that worker's global generators (Python, NumPy, torch CPU), and wherever it runs the
    generator objects the dataset holds (``self.rng = np.random.default_rng(0)``), saved with
    every batch it fetches. Wrapping an ``IterableDataset`` gives a ``StreamRNG``.
    """

    def __new__(cls, *args: Any) -> Any:
        if cls is WorkerRNG and args and isinstance(args[0], IterableDataset):
            return StreamRNG(args[0])
        return super().__new__(cls)  # also when unpickled in a worker process, with no args

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def state_dict(self) -> dict[str, Any]:
        return self._generators()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:
            self._set_generators(state_dict)


class StreamRNG(_KeptGenerators, IterableDataset):
    """``WorkerRNG`` for an ``IterableDataset``: the stream's position (its own state when it
    has ``state_dict()``, else the number of items it yielded, replayed on resume) and its
    random generators, set once the position is restored."""

    def __init__(self, dataset: IterableDataset) -> None:
        self.dataset = dataset
        self._items: Iterator[Any] | None = None
        self._yielded = 0
        self._saved: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return {
            **self._generators(),
            "yielded": self._yielded,
            "dataset": self.dataset.state_dict() if isinstance(self.dataset, Stateful) else None,
            "iterator": self._items.state_dict() if isinstance(self._items, Stateful) else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved = state_dict  # applied by the iterator the loader makes next

    def __iter__(self) -> Iterator[Any]:
        # Restored here, not in the generator below: the loader makes this iterator while it
        # resumes, before the run sets the main process's generators back to the save.
        saved, self._saved = self._saved, None
        if saved and saved["dataset"] is not None:
            self.dataset.load_state_dict(saved["dataset"])
        self._items, self._yielded = iter(self.dataset), 0
        if saved:
            if saved["iterator"] is not None:
                self._items.load_state_dict(saved["iterator"])
            elif saved["dataset"] is None:  # no state of its own: replayed from its start
                for _ in itertools.islice(self._items, saved["yielded"]):
                    pass
            self._yielded = saved["yielded"]
            self._set_generators(saved)
        return self._counted(self._items)

    def _counted(self, items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            self._yielded += 1
            yield item


def loader_generators(loader: Any) -> dict[str, Any]:
    """The generator objects a loader draws from as an epoch starts: its own ``generator=``
    (base seeds, its default shuffling) and its samplers' (each object once)."""
    owners = {
        "loader": loader,
        "sampler": loader.sampler,
        "batch_sampler": loader.batch_sampler,
        "batch_sampler.sampler": getattr(loader.batch_sampler, "sampler", None),
    }
    found: dict[str, Any] = {}
    for name, owner in owners.items():
        for key, generator in held_generators(owner, name).items():
            if all(generator is not g for g in found.values()):
                found[key] = generator
    return found


def _states(loader: Any) -> dict[str, Any]:
    return {k: generator_state(g) for k, g in loader_generators(loader).items()}


def _now(loader: Any) -> dict[str, Any]:
    return {"global": RNGState(cuda=False).state_dict(), "loader": _states(loader)}


class LoaderGenerator:
    """The generators a StatefulDataLoader draws from as its iterator starts: those of
    ``loader_generators`` and, with ``starting``, the global ones (used by a loader without
    ``generator=`` and by a sampler without one).

    Resuming, the loader makes its iterator again and draws what it drew as the saved epoch
    started: base seeds, and a stateless sampler its whole order. So the generators are set
    back to their states at that epoch's start before the iterator is made (``starting``), and
    to their states at the save once it exists (``started``): without worker processes the
    next epoch would otherwise shuffle differently.
    """

    def __init__(self) -> None:
        self._epoch_start: dict[str, Any] | None = None
        self._pending: dict[str, Any] | None = None

    def state_dict(self, loader: Any) -> dict[str, Any]:
        # Before any epoch, its start is now: the saved structure is the same either way (a
        # sharded load fills the live structure).
        return {"at_save": _states(loader), "epoch_start": self._epoch_start or _now(loader)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict

    def starting(self, loader: Any) -> None:
        """Call just before making the loader's iterator for an epoch (or the resumed one)."""
        start = self._pending and self._pending.get("epoch_start")
        if start:
            RNGState(cuda=False).load_state_dict(start["global"])
            self._set(loader, start["loader"])
        self._epoch_start = start or _now(loader)

    def started(self, loader: Any) -> None:
        """Call once the resumed loader's first iterator exists, before it draws for a new
        epoch (a save at an epoch's last batch resumes into the next epoch)."""
        if self._pending is not None:
            self._set(loader, self._pending["at_save"])
            self._pending = None

    @staticmethod
    def _set(loader: Any, states: dict[str, Any]) -> None:
        generators = loader_generators(loader)
        for key, state in states.items():
            set_generator_state(generators[key], state)


class LoaderPosition:
    """The loader's state with the position the run counted: the batches it took from the
    loader's current iterator, true across any number of resumes."""

    def __init__(self) -> None:
        self.taken: int | None = None  # None until the run iterates the loader
        self._resumed = 0

    def state_dict(self, loader: Any) -> dict[str, Any]:
        state = loader.state_dict()
        if self.taken is None:
            return state
        if _SingleProcess._NUM_YIELDED in state:
            return {**state, _SingleProcess._NUM_YIELDED: self.taken}
        since = state[_Workers._STEPS_SINCE_SNAPSHOT]
        snapshot = {**state[_Workers._SNAPSHOT], _Workers._SNAPSHOT_STEP: self.taken - since}
        return {**state, _Workers._SNAPSHOT: snapshot}

    def load_state_dict(self, loader: Any, state: dict[str, Any]) -> None:
        loader.load_state_dict(state)
        if _SingleProcess._NUM_YIELDED in state:
            self._resumed = state[_SingleProcess._NUM_YIELDED]
        elif _Workers._SNAPSHOT in state:
            snapshot_step = state[_Workers._SNAPSHOT][_Workers._SNAPSHOT_STEP]
            self._resumed = snapshot_step + state[_Workers._STEPS_SINCE_SNAPSHOT]

    def counted(self, batches: Iterator[Any]) -> Iterator[Any]:
        """The batches of an iterator the loader just made, counted."""
        self.taken, self._resumed = self._resumed, 0
        for batch in batches:
            self.taken += 1
            yield batch


def unkept_randomness(loader: Any) -> None:
    """Refuse a dataset holding generator objects that nothing keeps; warn when worker
    processes may draw from global generators that nothing keeps."""
    dataset = loader.dataset
    if isinstance(dataset, WorkerRNG | StreamRNG):
        return
    if held := dataset_generators(dataset):
        path, generator = next(iter(held.items()))
        raise ConfigError(
            f"the loader's {path} is a {type(generator).__name__} that no checkpoint keeps; "
            "wrap the dataset in spotsafe.WorkerRNG(dataset), which saves it with the "
            "loader's position"
        )
    # A stream without state of its own is replayed from its start in workers seeded as
    # before, so its workers' generators come out as they were; anything else resumes
    # mid-epoch with them seeded afresh.
    stream_replayed = isinstance(dataset, IterableDataset) and not isinstance(dataset, Stateful)
    if getattr(loader, "num_workers", 0) and not stream_replayed:
        log.warning(
            "the loader's %d worker processes draw from random generators no checkpoint keeps; "
            "if the dataset draws random numbers (augmentation), wrap it in spotsafe.WorkerRNG",
            loader.num_workers,
        )
