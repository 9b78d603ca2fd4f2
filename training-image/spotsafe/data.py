"""Exact data-loader resume with worker processes.

torchdata's StatefulDataLoader saves the sampler (shuffle order and generator) and, for each
worker process, the state of the dataset it holds. A worker's own random generators are not part
of that: they are seeded afresh when a resumed loader starts its workers, so augmentation that
draws from them mid-epoch would differ. ``WorkerRNG`` makes them the dataset's state.
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset, get_worker_info

from spotsafe.state import RNGState


class WorkerRNG(Dataset):
    """A map-style dataset whose state, inside a loader's worker process, is that worker's
    random generators (Python, NumPy, torch CPU), saved with every batch it fetches.

    In the main process it has no state: the run keeps the main process's generators itself.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def state_dict(self) -> dict[str, Any]:
        return RNGState(cuda=False).state_dict() if get_worker_info() is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:
            RNGState(cuda=False).load_state_dict(state_dict)


class LoaderGenerator:
    """The shuffling generator of a StatefulDataLoader, kept as it was at the save.

    Resuming, the loader sets that generator back to the start of the saved epoch and draws
    the epoch's permutation again, but not the draws it made after it (without worker
    processes, the next epoch would then shuffle differently). So the generator's state at the
    save is kept, and set once the resumed loader has started its epoch.
    """

    def __init__(self) -> None:
        self._pending = None

    def state_dict(self, loader: Any) -> dict[str, Any]:
        generator = getattr(loader, "generator", None)
        return {} if generator is None else {"generator": generator.get_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict.get("generator")

    def started(self, loader: Any) -> None:
        """Call once the resumed loader's first iterator exists, before it draws for a new
        epoch (a save at an epoch's last batch resumes into the next epoch)."""
        if self._pending is not None:
            loader.generator.set_state(self._pending)
            self._pending = None
