"""Kueue objects: valid for v0.19.2's CRDs, spot first, and waiting jobs are never deactivated."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.config import KueueConfig
from components.k8s.jobs import EFA_RESOURCE
from components.k8s.kueue import (
    ON_DEMAND_FLAVOR,
    SPOT_FLAVOR,
    KueueArgs,
    TeamQueue,
    cluster_queue,
    kueue_configuration,
    local_queue,
    resource_flavor,
)
from components.k8s.placement import ON_DEMAND, SPOT
from spotctl.render import crd_schemas, validate

TEAM = TeamQueue("vision", "team-vision", spot_gpus=64, on_demand_gpus=8, borrow_spot_gpus=16)
ARGS = KueueArgs(
    teams=(TEAM,), spot=SPOT, on_demand=ON_DEMAND, cpu_per_gpu=8, memory_gib_per_gpu=64
)


@pytest.fixture(scope="module")
def kueue_crds(shared_schemas: Path) -> Path:
    return shared_schemas / "kueue-v0.19.2"


def test_objects_validate_against_the_crds(kueue_crds: Path) -> None:
    objects = [
        resource_flavor(SPOT_FLAVOR, SPOT),
        resource_flavor(ON_DEMAND_FLAVOR, ON_DEMAND),
        cluster_queue(ARGS, TEAM),
        local_queue(TEAM),
    ]
    assert all(obj["apiVersion"] == "kueue.x-k8s.io/v1beta2" for obj in objects)
    problems, unvalidated = validate(objects, "1.33", [kueue_crds])
    assert (problems, unvalidated) == ([], [])


def test_schema_check_catches_a_broken_cluster_queue(kueue_crds: Path) -> None:
    broken = cluster_queue(ARGS, TEAM)
    broken["spec"]["flavorFungibility"]["whenCanBorrow"] = "Borrow"  # removed in v1beta2
    broken["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].pop("nominalQuota")
    problems, _ = validate([broken], "1.33", [kueue_crds])
    assert any("whenCanBorrow" in p and "'Borrow' is not one of" in p for p in problems)
    assert any("'nominalQuota' is a required property" in p for p in problems)


def test_v1beta2_is_served_by_every_kueue_crd(kueue_crds: Path) -> None:
    kinds = {kind for (version, kind) in crd_schemas([kueue_crds]) if version.endswith("v1beta2")}
    assert {"ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort"} <= kinds


def test_cluster_queue_tries_spot_then_on_demand_with_quotas_per_flavor() -> None:
    spec = cluster_queue(ARGS, TEAM)["spec"]
    assert spec["cohortName"] == "training"
    group = spec["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    spot, on_demand = group["flavors"]
    assert (spot["name"], on_demand["name"]) == (SPOT_FLAVOR, ON_DEMAND_FLAVOR)
    quota = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    assert quota["spot"]["nvidia.com/gpu"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 64,
        "borrowingLimit": 16,
    }
    assert quota["spot"]["cpu"]["nominalQuota"] == 64 * 8
    assert quota["spot"]["memory"]["nominalQuota"] == f"{64 * 64}Gi"
    assert quota["on-demand"]["nvidia.com/gpu"]["nominalQuota"] == 8
    # On-demand is never borrowed from other teams: it is the paid fallback.
    assert quota["on-demand"]["nvidia.com/gpu"]["borrowingLimit"] == 0
    assert spec["flavorFungibility"]["whenCanPreempt"] == "TryNextFlavor"
    assert spec["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "team-vision"}
    }


def test_flavors_select_and_tolerate_their_nodes() -> None:
    spot = resource_flavor(SPOT_FLAVOR, SPOT)["spec"]
    assert spot["nodeLabels"] == {"capacity-type": "spot"}
    assert spot["tolerations"] == [
        {"key": "capacity-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
    ]
    assert resource_flavor(ON_DEMAND_FLAVOR, ON_DEMAND)["spec"] == {
        "nodeLabels": {"capacity-type": "on-demand"},
        "tolerations": [],
    }


def test_waiting_workloads_requeue_forever() -> None:
    config = kueue_configuration(KueueConfig(pods_ready_timeout="7m", backoff_max_seconds=600))
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    wait = config["waitForPodsReady"]
    assert wait["timeout"] == "7m"
    strategy = wait["requeuingStrategy"]
    # A limit would deactivate a job after N dry spells; none is set.
    assert "backoffLimitCount" not in strategy
    assert strategy["timestamp"] == "Creation"
    assert strategy["backoffMaxSeconds"] == 600
    assert config["metrics"]["enableClusterQueueResources"] is True
    # It survives the trip through the chart's YAML string.
    assert yaml.safe_load(yaml.safe_dump(config)) == config


def test_efa_interfaces_are_not_quota() -> None:
    # A pod's EFA request would otherwise make its workload inadmissible: no flavor covers it.
    resources = kueue_configuration(KueueConfig())["resources"]
    assert resources["excludeResourcePrefixes"] == [EFA_RESOURCE]


def test_negative_quota_is_rejected_clearly() -> None:
    bad = TeamQueue("vision", "team-vision", spot_gpus=-1, on_demand_gpus=0)
    with pytest.raises(ValueError, match="team 'vision': spot_gpus must be >= 0"):
        KueueArgs(
            teams=(bad,), spot=SPOT, on_demand=ON_DEMAND, cpu_per_gpu=8, memory_gib_per_gpu=64
        )
