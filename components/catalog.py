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
    # The quota a GPU type's capacity counts against, per capacity type ("spot", "on-demand"):
    # EC2's vCPU quota family ("g-family"), or Compute Engine's preemptible GPU family ("L4",
    # spot only). Empty for a CPU type.
    quota_families: tuple[tuple[str, str], ...] = ()

    @property
    def accelerator(self) -> tuple[str, int] | None:
        """(GPU model, GiB per GPU): what a GPU class is made of; None for a CPU type."""
        return (self.gpu, self.gpu_memory_gib) if self.gpus else None

    @property
    def vcpus_per_gpu(self) -> float:
        return self.vcpus / self.gpus

    def quota_family(self, capacity: str) -> str:
        """The quota family this type's `capacity` ("spot", "on-demand") counts against."""
        return dict(self.quota_families)[capacity]


@dataclass(frozen=True)
class QuotaFamily:
    """An EC2 vCPU quota of GPU instance families for one capacity type, e.g. "All G and VT Spot
    Instance Requests"."""

    name: str  # the quota's name, as Service Quotas spells it
    instance_families: tuple[str, ...]  # "g5": a type's name before the dot
    code: str  # its Service Quotas code


@dataclass(frozen=True)
class Catalog:
    instance_types: dict[str, InstanceType]
    zones: dict[str, tuple[str, ...]]  # region -> its zone names
    # accelerator type -> region -> the zones that offer it (GCP: a pool's zones must offer it)
    accelerator_zones: dict[str, dict[str, tuple[str, ...]]]
    # EC2's GPU vCPU quotas: capacity ("spot", "on-demand") -> family id ("g-family") -> quota
    # (AWS)
    quota_families: dict[str, dict[str, QuotaFamily]] = field(default_factory=dict)
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
        capacity: {
            family: QuotaFamily(
                name=fields["name"],
                instance_families=tuple(fields["instance_families"]),
                code=fields["code"],
            )
            for family, fields in families.items()
        }
        for capacity, families in document.get("quota_families", {}).items()
    }
    preemptible = dict(document.get("preemptible_gpu_families", {}))
    instance_types = {}
    for name, fields in document["instance_types"].items():
        instance = InstanceType(name=name, **fields)
        if instance.gpus:
            families = _quota_families(instance, quota_families, preemptible)
            instance = replace(instance, quota_families=families)
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


def _quota_families(
    instance: InstanceType,
    quota_families: dict[str, dict[str, QuotaFamily]],
    preemptible: dict[str, str],
) -> tuple[tuple[str, str], ...]:
    if instance.gke_accelerator is not None:
        family = preemptible.get(instance.gke_accelerator)
        if family is None:
            raise CatalogError(
                f"GPU machine type {instance.name!r}: its accelerator "
                f"{instance.gke_accelerator!r} has no preemptible GPU family "
                "(preemptible_gpu_families in components/catalog.yaml)"
            )
        return (("spot", family),)
    instance_family = instance.name.split(".")[0]
    found = []
    for capacity, families in quota_families.items():
        family = next(
            (f for f, quota in families.items() if instance_family in quota.instance_families),
            None,
        )
        if family is None:
            raise CatalogError(
                f"GPU instance type {instance.name!r}: its instance family {instance_family!r} "
                f"counts against no {capacity} quota family (quota_families in "
                "components/catalog.yaml), so no quota check would cover it"
            )
        found.append((capacity, family))
    return tuple(found)


def class_name(accelerator: tuple[str, int]) -> str:
    """The name a GPU class of this accelerator carries, e.g. ("a10g", 24) -> "a10g-24gb"."""
    model, memory_gib = accelerator
    return f"{model}-{memory_gib}gb"
