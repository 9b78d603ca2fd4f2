"""The instance type catalog (`catalog.yaml`): what each type offers, the quota its GPUs count
against, and each region's zones.

It is the single source of every fit and quota check: nothing else hard-codes the size or the quota
family of an instance type. Its sources are named at the top of the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

CATALOG_FILE = Path(__file__).with_name("catalog.yaml")


class CatalogError(ValueError):
    """The catalog contradicts itself, e.g. a GPU type that counts against no quota."""


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
    # The quota a GPU type's capacity counts against: EC2's vCPU quota family ("g-family"), or
    # Compute Engine's preemptible GPU family ("L4"). None for a CPU type.
    quota_family: str | None = None

    @property
    def accelerator(self) -> tuple[str, int] | None:
        """(GPU model, GiB per GPU): what a GPU class is made of; None for a CPU type."""
        return (self.gpu, self.gpu_memory_gib) if self.gpus else None

    @property
    def vcpus_per_gpu(self) -> float:
        return self.vcpus / self.gpus


@dataclass(frozen=True)
class QuotaFamily:
    """An EC2 vCPU quota of GPU instance families, e.g. "G and VT"."""

    name: str  # as the quota's name spells it
    instance_families: tuple[str, ...]  # "g5": a type's name before the dot
    quota_codes: dict[str, str]  # capacity ("spot", "on-demand") -> Service Quotas code


@dataclass(frozen=True)
class Catalog:
    instance_types: dict[str, InstanceType]
    zones: dict[str, tuple[str, ...]]  # region -> its zone names
    # accelerator type -> region -> the zones that offer it (GCP: a pool's zones must offer it)
    accelerator_zones: dict[str, dict[str, tuple[str, ...]]]
    # EC2's GPU vCPU quotas by family id ("g-family") (AWS)
    quota_families: dict[str, QuotaFamily] = field(default_factory=dict)
    # accelerator type -> the family of its preemptible GPU quota (GCP)
    preemptible_gpu_families: dict[str, str] = field(default_factory=dict)


@cache
def catalog(cloud: str) -> Catalog:
    return read_catalog(_document()[cloud])


@cache
def _document() -> dict[str, Any]:
    """catalog.yaml, parsed once for both clouds' sections."""
    return yaml.safe_load(CATALOG_FILE.read_text())


def read_catalog(document: dict[str, Any]) -> Catalog:
    """One cloud's section of the catalog; a GPU type whose quota family is not known is a
    CatalogError naming it."""
    quota_families = {
        family: QuotaFamily(
            name=fields["name"],
            instance_families=tuple(fields["instance_families"]),
            quota_codes=dict(fields["quota_codes"]),
        )
        for family, fields in document.get("quota_families", {}).items()
    }
    preemptible = dict(document.get("preemptible_gpu_families", {}))
    instance_types = {}
    for name, fields in document["instance_types"].items():
        instance = InstanceType(name=name, **fields)
        if instance.gpus:
            family = _quota_family(instance, quota_families, preemptible)
            instance = replace(instance, quota_family=family)
        instance_types[name] = instance
    return Catalog(
        instance_types=instance_types,
        zones={region: tuple(names) for region, names in document["zones"].items()},
        accelerator_zones={
            accelerator: {region: tuple(names) for region, names in regions.items()}
            for accelerator, regions in document.get("accelerator_zones", {}).items()
        },
        quota_families=quota_families,
        preemptible_gpu_families=preemptible,
    )


def _quota_family(
    instance: InstanceType, quota_families: dict[str, QuotaFamily], preemptible: dict[str, str]
) -> str:
    if instance.gke_accelerator is not None:
        family = preemptible.get(instance.gke_accelerator)
        if family is None:
            raise CatalogError(
                f"GPU machine type {instance.name!r}: its accelerator "
                f"{instance.gke_accelerator!r} has no preemptible GPU family "
                "(preemptible_gpu_families in components/catalog.yaml)"
            )
        return family
    instance_family = instance.name.split(".")[0]
    for family, quota in quota_families.items():
        if instance_family in quota.instance_families:
            return family
    raise CatalogError(
        f"GPU instance type {instance.name!r}: its instance family {instance_family!r} counts "
        "against no quota family (quota_families in components/catalog.yaml), so no quota "
        "check would cover it"
    )


def class_name(accelerator: tuple[str, int]) -> str:
    """The name a GPU class of this accelerator carries, e.g. ("a10g", 24) -> "a10g-24gb"."""
    model, memory_gib = accelerator
    return f"{model}-{memory_gib}gb"
