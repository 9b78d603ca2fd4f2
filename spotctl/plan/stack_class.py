"""A stack's GPU class in the planner's terms: the instance type a node is, the region, the
class's capacity by type, and the provider data table's prices and interruption band for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from components.catalog import catalog
from spotctl.provider_data import ProviderData, Row

if TYPE_CHECKING:
    from components.config import StackConfig


class StackClassError(ValueError):
    """A class, instance type or node count the stack does not allow; the message names the
    option and the choices."""


@dataclass(frozen=True)
class ClassOffer:
    stack: str
    gpu_class: str
    cloud: str
    region: str
    instance_type: str
    gpus_per_node: int
    gpu_memory_gib: int
    spot_gpus: int
    on_demand_gpus: int
    row: Row | None
    """The table's row for the type in the region; None where it has none."""
    band: str | None
    """The interruption band the table gives the type, or assumes (GCP); None without a row."""
    band_source: str
    table: str
    """The table's file name, for the sources the plan states."""
    network: tuple[float, str] | None
    """The type's network bandwidth in Gbit/s and its source, from the table; None where it has
    none."""


def resolve(
    settings: StackConfig,
    stack: str,
    class_name: str,
    instance_type: str | None,
    nodes: int,
    data: ProviderData,
) -> ClassOffer:
    """The class `class_name` of the stack, a node of `instance_type` (default: the class's type
    with the most GPUs, as multi-node training wants), `nodes` of them on its spot capacity."""
    classes = {c.name: c for c in settings.gpu_classes}
    gpu_class = classes.get(class_name)
    if gpu_class is None:
        raise StackClassError(
            f"--class {class_name}: stack {stack} has no such GPU class; its classes: "
            f"{', '.join(classes)}"
        )
    types = catalog(settings.cloud).instance_types
    if instance_type is None:
        instance_type = max(gpu_class.instance_types, key=lambda t: types[t].gpus)
    elif instance_type not in gpu_class.instance_types:
        raise StackClassError(
            f"--instance-type {instance_type}: not a type of class {class_name} in stack {stack}; "
            f"its types: {', '.join(gpu_class.instance_types)}"
        )
    gpus = types[instance_type].gpus
    if gpu_class.spot_gpus == 0:
        raise StackClassError(
            f"--class {class_name}: stack {stack} gives it no spot capacity (spot_gpus: 0)"
        )
    if nodes * gpus > gpu_class.spot_gpus:
        raise StackClassError(
            f"--nodes {nodes}: {nodes} x {instance_type} is {nodes * gpus} GPUs, more than class "
            f"{class_name}'s spot capacity in stack {stack} (spot_gpus: {gpu_class.spot_gpus})"
        )
    row = data.row(settings.cloud, settings.region, instance_type)
    if row is None:
        band, source = None, ""
    elif row.band is not None:
        band = row.band
        source = (
            f"the advisor's band for {instance_type} in {settings.region} in {data.path.name} "
            f"of {data.date}"
        )
    else:
        band = data.gcp_spot_band
        source = f"assumed for GCP Spot VMs: {data.gcp_spot_band_why}"
    return ClassOffer(
        stack=stack,
        gpu_class=class_name,
        cloud=settings.cloud,
        region=settings.region,
        instance_type=instance_type,
        gpus_per_node=gpus,
        gpu_memory_gib=types[instance_type].gpu_memory_gib,
        spot_gpus=gpu_class.spot_gpus,
        on_demand_gpus=gpu_class.on_demand_gpus,
        row=row,
        band=band,
        band_source=source,
        table=data.path.name,
        network=data.network_gbps(settings.cloud, instance_type),
    )
