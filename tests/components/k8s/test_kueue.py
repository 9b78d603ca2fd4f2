"""Kueue objects: valid for v0.19.2's CRDs, per GPU class spot first, waiting jobs never
deactivated."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.config import KueueConfig
from components.k8s.jobs import EFA_RESOURCE
from components.k8s.kueue import (
    ClassQuota,
    KueueArgs,
    KueueClass,
    TeamQueue,
    cluster_queue,
    kueue_configuration,
    local_queue,
    resource_flavor,
)
from spotctl.render.manifests import crd_schemas, validate

L40S = KueueClass("l40s-48gb", cpu_per_gpu=10, memory_gib_per_gpu=80)
H100 = KueueClass("h100-80gb", cpu_per_gpu=12, memory_gib_per_gpu=160)
TEAM = TeamQueue(
    "vision",
    "team-vision",
    quotas={"l40s-48gb": ClassQuota(spot_gpus=64, on_demand_gpus=8)},
    borrow_spot_gpus=16,
)
ARGS = KueueArgs(teams=(TEAM,), classes=(L40S, H100))


@pytest.fixture(scope="module")
def kueue_crds(shared_schemas: Path) -> Path:
    return shared_schemas / "kueue-v0.19.2"


def test_objects_validate_against_the_crds(kueue_crds: Path) -> None:
    objects = [
        resource_flavor("l40s-48gb", "spot"),
        resource_flavor("l40s-48gb", "on-demand"),
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


def test_cluster_queue_tries_each_class_spot_then_on_demand_with_quotas_per_class() -> None:
    spec = cluster_queue(ARGS, TEAM)["spec"]
    assert spec["cohortName"] == "training"
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert [f["name"] for f in group["flavors"]] == [
        "l40s-48gb-spot",
        "l40s-48gb-on-demand",
        "h100-80gb-spot",
        "h100-80gb-on-demand",
    ]
    quota = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    assert quota["l40s-48gb-spot"]["nvidia.com/gpu"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 64,
        "borrowingLimit": 16,
    }
    # CPU and memory come with each GPU, by class.
    assert quota["l40s-48gb-spot"]["cpu"]["nominalQuota"] == 64 * 10
    assert quota["l40s-48gb-spot"]["memory"]["nominalQuota"] == f"{64 * 80}Gi"
    assert quota["l40s-48gb-on-demand"]["nvidia.com/gpu"]["nominalQuota"] == 8
    # On-demand is never borrowed from other teams: it is the paid fallback.
    assert quota["l40s-48gb-on-demand"]["nvidia.com/gpu"]["borrowingLimit"] == 0
    # No quota of a class: nothing nominal, but idle spot of others may be borrowed.
    assert quota["h100-80gb-spot"]["nvidia.com/gpu"]["nominalQuota"] == 0
    assert quota["h100-80gb-spot"]["nvidia.com/gpu"]["borrowingLimit"] == 16
    assert quota["h100-80gb-spot"]["memory"]["borrowingLimit"] == f"{16 * 160}Gi"
    assert spec["flavorFungibility"]["whenCanPreempt"] == "TryNextFlavor"
    assert spec["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "team-vision"}
    }


def test_flavors_select_their_class_and_only_on_demand_pins_the_capacity_type() -> None:
    """The spot flavor names the class only, so the provisioner may start its pods on the class's
    on-demand nodes when spot is dry; the on-demand flavor is on-demand nodes only."""
    spot = resource_flavor("l40s-48gb", "spot")
    assert spot["metadata"]["name"] == "l40s-48gb-spot"
    assert spot["spec"]["nodeLabels"] == {"gpu-class": "l40s-48gb"}
    gpu = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    assert spot["spec"]["tolerations"] == [
        {"key": "capacity-type", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
        gpu,
    ]
    assert resource_flavor("l40s-48gb", "on-demand")["spec"] == {
        "nodeLabels": {"gpu-class": "l40s-48gb", "capacity-type": "on-demand"},
        "tolerations": [gpu],
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


@pytest.mark.parametrize(
    ("team", "message"),
    [
        (
            TeamQueue("vision", "team-vision", quotas={"l40s-48gb": ClassQuota(spot_gpus=-1)}),
            "team 'vision': quotas must be >= 0",
        ),
        (
            TeamQueue("vision", "team-vision", quotas={"a10g-24gb": ClassQuota(spot_gpus=1)}),
            r"team 'vision': quota of unknown classes \['a10g-24gb'\]",
        ),
    ],
)
def test_bad_quotas_are_rejected_clearly(team: TeamQueue, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KueueArgs(teams=(team,), classes=(L40S,))
