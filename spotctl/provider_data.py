"""The provider data table (policies/provider-data.yaml): spot interruption bands and prices per
instance type and region, each row with the date it was read, its sources and what in it is an
estimate. `spotctl review` takes the bands from it, `spotctl plan --stack --class` the prices and
the band of a class's instance type."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import yaml

DATA_FILE = Path(__file__).resolve().parents[1] / "policies" / "provider-data.yaml"


class ProviderDataError(ValueError):
    """The table cannot be read; the message names the file and the key."""


@dataclass(frozen=True)
class Row:
    """One instance type in one region."""

    cloud: str
    region: str
    instance_type: str
    band: str | None
    """The advisor's band; None where the provider publishes none (GCP)."""
    on_demand: float
    spot: float
    read: date
    sources: tuple[str, ...]
    """Each source's name and address."""
    estimate: str | None
    """Which figures are estimates, and how they were made; None: all read as published."""


@dataclass(frozen=True)
class ProviderData:
    path: Path
    date: date
    source: str
    bands: tuple[str, ...]
    gcp_spot_band: str
    gcp_spot_band_why: str
    rows: dict[tuple[str, str, str], Row]
    """(cloud, region, instance type) -> its row."""
    network: dict[tuple[str, str], tuple[float, str]]
    """(cloud, instance type) -> its published network bandwidth in Gbit/s, and the source."""

    def row(self, cloud: str, region: str, instance_type: str) -> Row | None:
        return self.rows.get((cloud, region, instance_type))

    def network_gbps(self, cloud: str, instance_type: str) -> tuple[float, str] | None:
        return self.network.get((cloud, instance_type))


def read(path: Path = DATA_FILE) -> ProviderData:
    """The table at `path`; a missing or malformed key is one ProviderDataError line."""
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ProviderDataError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ProviderDataError(f"{path}: not YAML: {exc}".splitlines()[0]) from None
    if not isinstance(document, dict):
        raise ProviderDataError(f"{path}: not a mapping")

    def need(mapping: dict, key: str, kind: type | tuple[type, ...], where: str) -> object:
        value = mapping.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ProviderDataError(f"{path}: {where}{key} is missing or not {_name(kind)}")
        return value

    bands = tuple(need(document, "bands", list, ""))
    sources = need(document, "sources", dict, "")
    gcp = need(document, "gcp_spot_band", dict, "")
    gcp_band = need(gcp, "band", str, "gcp_spot_band.")
    if gcp_band not in bands:
        raise ProviderDataError(f"{path}: gcp_spot_band.band {gcp_band!r} is not one of bands")
    rows = {}
    for cloud in ("aws", "gcp"):
        for region, types in (document.get(cloud) or {}).items():
            for name, row in (types or {}).items():
                where = f"{cloud}.{region}.{name}."
                if not isinstance(row, dict):
                    raise ProviderDataError(f"{path}: {cloud}.{region}.{name} is not a mapping")
                band = row.get("band")
                if band is not None and band not in bands:
                    raise ProviderDataError(f"{path}: {where}band {band!r} is not one of bands")
                if band is None and cloud == "aws":
                    raise ProviderDataError(f"{path}: {where}band is missing")
                prices = {
                    key: float(need(row, key, (int, float), where)) for key in ("on_demand", "spot")
                }
                if prices["on_demand"] <= 0 or prices["spot"] < 0:
                    raise ProviderDataError(f"{path}: {where}prices must be positive")
                keys = need(row, "sources", list, where)
                unknown = [key for key in keys if key not in sources]
                if unknown:
                    raise ProviderDataError(
                        f"{path}: {where}sources: {unknown[0]!r} is not in sources"
                    )
                rows[cloud, region, name] = Row(
                    cloud=cloud,
                    region=region,
                    instance_type=name,
                    band=band,
                    on_demand=prices["on_demand"],
                    spot=prices["spot"],
                    read=need(row, "read", date, where),
                    sources=tuple(" ".join(str(sources[key]).split()) for key in keys),
                    estimate=" ".join(row["estimate"].split()) if row.get("estimate") else None,
                )
    network = {}
    for cloud, section in (document.get("network") or {}).items():
        where = f"network.{cloud}."
        if not isinstance(section, dict):
            raise ProviderDataError(f"{path}: network.{cloud} is not a mapping")
        source = need(section, "source", str, where)
        if source not in sources:
            raise ProviderDataError(f"{path}: {where}source: {source!r} is not in sources")
        for name, gbps in need(section, "gbps", dict, where).items():
            if isinstance(gbps, bool) or not isinstance(gbps, int | float) or gbps <= 0:
                raise ProviderDataError(f"{path}: {where}gbps.{name} must be a positive number")
            network[cloud, name] = (float(gbps), " ".join(str(sources[source]).split()))
    return ProviderData(
        path=path,
        date=need(document, "date", date, ""),
        source=str(document.get("source", "")),
        bands=bands,
        gcp_spot_band=gcp_band,
        gcp_spot_band_why=" ".join(need(gcp, "why", str, "gcp_spot_band.").split()),
        rows=rows,
        network=network,
    )


def _name(kind: type | tuple[type, ...]) -> str:
    names = {list: "a list", dict: "a mapping", str: "text", date: "a date (YYYY-MM-DD)"}
    return names.get(kind, "a number") if isinstance(kind, type) else "a number"
