"""The instance type catalog (`catalog.yaml`): what each type offers, and each region's zones.

It is the single source of every fit and quota check: nothing else hard-codes the size of an
instance type. Its sources are named at the top of the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

CATALOG_FILE = Path(__file__).with_name("catalog.yaml")


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: float
    architecture: str  # x86_64 or arm64
    gpus: int = 0
    gpu: str | None = None  # lower-case GPU model, e.g. "a10g"
    gpu_memory_gib: int = 0  # per GPU, as sold
    efa: int = 0  # EFA interfaces the type supports
    gke_accelerator: str | None = None  # GKE's accelerator type, e.g. "nvidia-l4" (GCP only)

    @property
    def accelerator(self) -> tuple[str, int] | None:
        """(GPU model, GiB per GPU): what a GPU class is made of; None for a CPU type."""
        return (self.gpu, self.gpu_memory_gib) if self.gpus else None

    @property
    def vcpus_per_gpu(self) -> float:
        return self.vcpus / self.gpus


@dataclass(frozen=True)
class Catalog:
    instance_types: dict[str, InstanceType]
    zones: dict[str, tuple[str, ...]]  # region -> its zone names
    # accelerator type -> region -> the zones that offer it (GCP: a pool's zones must offer it)
    accelerator_zones: dict[str, dict[str, tuple[str, ...]]]


@cache
def catalog(cloud: str) -> Catalog:
    document = yaml.safe_load(CATALOG_FILE.read_text())[cloud]
    return Catalog(
        instance_types={
            name: InstanceType(name=name, **fields)
            for name, fields in document["instance_types"].items()
        },
        zones={region: tuple(names) for region, names in document["zones"].items()},
        accelerator_zones={
            accelerator: {region: tuple(names) for region, names in regions.items()}
            for accelerator, regions in document.get("accelerator_zones", {}).items()
        },
    )


def class_name(accelerator: tuple[str, int]) -> str:
    """The name a GPU class of this accelerator carries, e.g. ("a10g", 24) -> "a10g-24gb"."""
    model, memory_gib = accelerator
    return f"{model}-{memory_gib}gb"
