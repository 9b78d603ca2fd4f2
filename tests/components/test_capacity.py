"""Capacity checks: a stack whose classes, quotas, zones or templates cannot run is refused with
one line per problem that names the field."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from stack_files import STACKS, spotctl_preview, stack_values

from components.aws.quotas import QUOTA_CODES
from components.catalog import CATALOG_FILE, CatalogError, catalog, class_name, read_catalog
from components.config import ConfigError, load_config
from components.config.capacity import allocatable
from components.gcp.quotas import preemptible_gpu_quota_id


def problems(stack: str, change) -> list[tuple[str, str]]:
    values = copy.deepcopy(stack_values(stack))
    change(values)
    with pytest.raises(ConfigError) as caught:
        load_config(values)
    return caught.value.problems


def only(stack: str, change) -> tuple[str, str]:
    (problem,) = problems(stack, change)
    return problem


@pytest.mark.parametrize("stack", STACKS)
def test_repository_stacks_pass_every_capacity_check(stack):
    config = load_config(stack_values(stack))
    assert config.gpu_classes and all(team.quotas for team in config.teams)


def test_a_class_never_mixes_accelerator_models():
    path, message = only(
        "prod", lambda v: v["gpu_classes"][1]["instance_types"].append("g5.48xlarge")
    )
    assert path == "gpu_classes[1].instance_types[3]"
    assert "'g5.48xlarge' carries a10g 24 GB GPUs but 'g6e.12xlarge' carries l40s 48 GB" in message


def test_a100_40_and_80_gb_are_different_classes():
    def mix(values):
        values["gpu_classes"][0] = {
            **values["gpu_classes"][0],
            "name": "a100-40gb",
            "instance_types": ["p4d.24xlarge", "p4de.24xlarge"],
        }

    path, message = problems("prod", mix)[0]
    assert path == "gpu_classes[0].instance_types[1]" and "a100 80 GB" in message


def test_a_class_is_named_after_its_gpus():
    def rename(values):
        values["gpu_classes"][0]["name"] = "fast"
        values["teams"][0]["quotas"] = {"fast": values["teams"][0]["quotas"]["a10g-24gb"]}

    assert only("dev", rename) == (
        "gpu_classes[0].name",
        "'fast' does not name its GPUs: its types carry a10g 24 GB, so call it 'a10g-24gb'",
    )


@pytest.mark.parametrize(
    ("where", "name", "path", "expected"),
    [
        (
            ("gpu_classes", 0),
            "g5.9xlarge",
            "gpu_classes[0].instance_types[3]",
            "unknown instance type 'g5.9xlarge': not in the catalog",
        ),
        (
            ("gpu_classes", 0),
            "m6i.large",
            "gpu_classes[0].instance_types[3]",
            "'m6i.large' has no GPU",
        ),
        (
            ("aws", "pools", "stable"),
            "m9z.large",
            "aws.pools.stable.instance_types[1]",
            "unknown instance type 'm9z.large'",
        ),
    ],
)
def test_unknown_and_gpu_less_instance_types_are_named(where, name, path, expected):
    def add(values):
        node = values
        for key in where:
            node = node[key]
        node["instance_types"].append(name)

    found_path, message = only("dev", add)
    assert found_path == path and expected in message


def test_an_arm64_gpu_class_is_refused_on_the_x86_64_ami():
    def graviton(values):
        values["gpu_classes"][0] = {
            **values["gpu_classes"][0],
            "name": "t4g-16gb",
            "instance_types": ["g5g.xlarge", "g5g.2xlarge"],
            "memory_gib_per_gpu": 4,
        }
        values["teams"][0]["quotas"] = {"t4g-16gb": {"spot_gpus": 4}}

    found = problems("dev", graviton)
    assert found[0] == (
        "gpu_classes[0].instance_types[0]",
        "'g5g.xlarge' is arm64, but GPU nodes run the x86_64 AMI and image "
        "(aws.gpu_ami.architecture)",
    )
    assert len(found) == 2  # one line per type


def test_stable_pool_of_two_architectures_is_refused():
    path, message = only(
        "prod", lambda v: v["aws"]["pools"]["stable"]["instance_types"].append("m7g.2xlarge")
    )
    assert path == "aws.pools.stable.instance_types" and "m7g.2xlarge arm64" in message


def test_a_gpu_buffer_belongs_to_a_class():
    path, message = only(
        "prod", lambda v: v["aws"]["pools"]["buffer"].__setitem__("instance_types", ["g5.12xlarge"])
    )
    assert path == "aws.pools.buffer.instance_types"
    assert "no class in gpu_classes[].name: add 'a10g-24gb'" in message


@pytest.mark.parametrize(
    ("zones", "expected"),
    [
        (["us-east-1a", "us-east-1z"], ("zones[1]", "'us-east-1z' is not a zone of us-east-1")),
        (["us-east-1a", "us-west-2a"], ("zones", "not zones of region 'us-east-1'")),
    ],
)
def test_zones_must_exist_in_the_region(zones, expected):
    path, message = only("dev", lambda v: v.__setitem__("zones", zones))
    assert path == expected[0] and expected[1] in message


def test_a_region_missing_from_the_catalog_is_named():
    def elsewhere(values):
        values["region"] = "ap-south-1"
        values["zones"] = ["ap-south-1a"]

    path, message = only("dev", elsewhere)
    assert path == "region" and "'ap-south-1' has no zones in the catalog" in message


def test_team_quotas_name_existing_classes():
    assert only("dev", lambda v: v["teams"][0]["quotas"].__setitem__("h100-80gb", {})) == (
        "teams[0].quotas['h100-80gb']",
        "no GPU class 'h100-80gb' among gpu_classes[].name ('a10g-24gb')",
    )


def test_quotas_beyond_the_pool_limit_name_the_team_that_crosses_it():
    def raise_quota(values):
        values["teams"][1]["quotas"]["l40s-48gb"]["spot_gpus"] = 65  # 64 + 65 > 128

    path, message = only("prod", raise_quota)
    assert path == "teams[1].quotas['l40s-48gb'].spot_gpus"
    assert "reach 129 GPUs here, more than its pool may run (gpu_classes[1].spot_gpus = 128)" in (
        message
    )


def test_the_issue_example_spot_quota_admitted_beyond_what_may_launch():
    """dev's old `spot_gpus: 100000`."""
    path, message = only(
        "dev", lambda v: v["teams"][0]["quotas"]["a10g-24gb"].__setitem__("spot_gpus", 100000)
    )
    assert path == "teams[0].quotas['a10g-24gb'].spot_gpus" and "100000 GPUs" in message


def test_pool_limits_beyond_the_service_quota_are_refused():
    """The issue's prod: 192 spot GPUs admitted against quotas that cover about 160."""
    path, message = only(
        "prod", lambda v: v["aws"]["spot_gpu_quota"].__setitem__("g_family_vcpus", 768)
    )
    assert path == "aws.spot_gpu_quota.g_family_vcpus"
    assert "may launch 3072 G-family vCPUs (gpu_classes[1].spot_gpus = 128 GPUs × 24 vCPUs)" in (
        message
    )
    assert message.endswith("only 768 are requested; request at least 3072")


def test_on_demand_capacity_needs_an_on_demand_quota_and_the_buffer_counts():
    path, message = only(
        "prod", lambda v: v["aws"]["on_demand_gpu_quota"].__setitem__("g_family_vcpus", None)
    )
    assert path == "aws.on_demand_gpu_quota.g_family_vcpus"
    assert "aws.pools.buffer.max_size = 4 nodes" in message and "no quota is requested" in message
    assert "768" in message


@pytest.mark.parametrize(
    ("change", "path"),
    [
        # The largest size, g5.4xlarge, keeps 15.39 of its 16 vCPUs for pods.
        (lambda v: v["gpu_classes"][0].update(cpu_per_gpu=16), "gpu_classes[0].cpu_per_gpu"),
        # The issue's dev: 64 GiB per GPU fits none of its sizes (g5.4xlarge keeps 57.5 GiB).
        (
            lambda v: v["gpu_classes"][0].update(memory_gib_per_gpu=64),
            "gpu_classes[0].memory_gib_per_gpu",
        ),
        (
            lambda v: v.setdefault("kubernetes", {}).update(templates={"gpus_per_node": 16}),
            "kubernetes.templates.gpus_per_node",
        ),
    ],
)
def test_a_template_larger_than_every_instance_of_its_class_is_refused(change, path):
    found_path, message = only("dev", change)
    assert found_path == path
    assert "no instance type of its class fits it after node reservations" in message
    assert "g5.xlarge offers 1 GPU, 3.42 CPU, 13.1 GiB" in message


def test_a_template_fits_when_one_size_of_the_class_does():
    """Only the largest sizes hold an 8-GPU pod; one is enough."""
    values = copy.deepcopy(stack_values("prod"))
    values["kubernetes"]["templates"]["gpus_per_node"] = 8
    load_config(values)


def test_template_class_must_be_one_every_team_has_quota_of():
    path, message = only(
        "prod",
        lambda v: v["kubernetes"]["templates"].__setitem__("gpu_class", "h100-80gb"),
    )
    assert path == "kubernetes.templates.gpu_class"
    assert "team 'vision' has no quota of class 'h100-80gb'" in message


def test_a_lag_as_long_as_the_notice_is_refused():
    assert only("dev", lambda v: v.setdefault("kubernetes", {}).update(notice_lag_seconds=120)) == (
        "kubernetes.notice_lag_seconds",
        "120 s leaves no time of the 120 s notice for the final save",
    )


def test_allocatable_follows_the_eks_reservations():
    """g5.xlarge: 4 vCPU, 16 GiB. CPU: 4000m - (60 + 10 + 5 + 5) kube-reserved - 500 for the
    node's DaemonSets. Memory: 16 GiB less 7.5 % for the hypervisor, 11 MiB x 29 pods + 255 MiB
    kube-reserved, 100 MiB eviction threshold and 1 GiB of DaemonSets."""
    room = allocatable(catalog("aws").instance_types["g5.xlarge"])
    assert room.millicpu == 4000 - 80 - 500
    assert room.memory_mib == int(16 * 1024 * 0.925 - (11 * 29 + 255) - 100 - 1024)
    assert room.gpus == 1
    big = allocatable(catalog("aws").instance_types["p5.48xlarge"])
    assert big.millicpu == 192_000 - (60 + 10 + 10 + 2.5 * 188) - 500


def test_allocatable_follows_the_gke_reservations():
    """g2-standard-8: 8 vCPU, 32 GiB. CPU as on EKS. Memory: GKE keeps 25 % of the first 4 GiB,
    20 % of the next 4, 10 % of the next 8 and 6 % of the next 16 (3.56 GiB), 100 MiB eviction
    threshold, and 1 GiB of DaemonSets; no hypervisor share."""
    room = allocatable(catalog("gcp").instance_types["g2-standard-8"], "gcp")
    assert room.millicpu == 8000 - (60 + 10 + 10 + 2.5 * 4) - 500
    assert room.memory_mib == int(32 * 1024 - 3.56 * 1024 - 100 - 1024)
    assert room.gpus == 1


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_catalog_rows_are_consistent(cloud):
    known = catalog(cloud)
    for name, instance in known.instance_types.items():
        assert instance.name == name and instance.vcpus > 0 and instance.memory_gib > 0
        assert instance.architecture in ("x86_64", "arm64")
        if instance.gpus:
            assert instance.gpu and instance.gpu_memory_gib > 0 and instance.efa >= 0
            assert class_name(instance.accelerator) == f"{instance.gpu}-{instance.gpu_memory_gib}gb"
        else:
            assert instance.gpu is None and instance.accelerator is None
    separator = {"aws": "", "gcp": "-"}[cloud]
    for region, zones in known.zones.items():
        assert zones and all(re.fullmatch(f"{region}{separator}[a-z]", zone) for zone in zones)
    # On GCP every GPU machine names its GKE accelerator, offered only in zones of the catalog.
    for instance in known.instance_types.values():
        assert (instance.gke_accelerator is not None) == (cloud == "gcp" and instance.gpus > 0)
    for regions in known.accelerator_zones.values():
        for region, zones in regions.items():
            assert zones and set(zones) <= set(known.zones[region]), region


@pytest.mark.parametrize(
    ("instance", "spot", "spot_code", "on_demand", "on_demand_code"),
    [
        # EC2 User Guide, "Spot Instance quotas" and "On-Demand Instance quotas": All G and VT
        # Spot Instance Requests / Running On-Demand G and VT instances; All P4, P3 and P2 and All
        # P5 Spot Instance Requests / Running On-Demand P instances; the codes Service Quotas
        # gives them.
        ("g6e.12xlarge", "g-family", "L-3819A6DF", "g-family", "L-DB2E81BA"),
        ("g5g.xlarge", "g-family", "L-3819A6DF", "g-family", "L-DB2E81BA"),
        ("p5.48xlarge", "p5-family", "L-C4BD4855", "p-family", "L-417A185B"),
        ("p5.4xlarge", "p5-family", "L-C4BD4855", "p-family", "L-417A185B"),
        ("p4de.24xlarge", "p4-family", "L-7212CCBC", "p-family", "L-417A185B"),
    ],
)
def test_a_gpu_type_counts_against_its_ec2_quota(
    instance, spot, spot_code, on_demand, on_demand_code
):
    known = catalog("aws").instance_types[instance]
    assert known.quota_family("spot") == spot and known.quota_family("on-demand") == on_demand
    assert QUOTA_CODES[("spot", spot)] == spot_code
    assert QUOTA_CODES[("on-demand", on_demand)] == on_demand_code


def reference_quota(quotas: list[dict], instance_family: str) -> dict:
    """The quota of the reference whose name lists the instance family's generation: "P5" in
    "All P5 Spot Instance Requests" for p5, "P4" in "All P4, P3 and P2 ..." for p4d, "G" in "All
    G and VT ..." for g6e; the longest such name wins."""
    found = {}
    for quota in quotas:
        listed = re.sub(
            r"^(All|Running On-Demand) | (Spot Instance Requests|instances)$", "", quota["name"]
        )
        for generation in re.split(r", | and ", listed):
            if instance_family.upper().startswith(generation):
                found[len(generation)] = quota
    assert found, f"no quota of the reference counts {instance_family}"
    return found[max(found)]


def test_every_gpu_type_counts_against_the_quota_ec2_names_for_it(shared_schemas):
    """Each capacity type's quota family of every GPU type is the quota EC2 names for its
    generation: reference aws-ec2-vcpu-quotas/quotas.yaml (quota names from the EC2 User Guide's
    "Spot Instance quotas" and "On-Demand Instance quotas", codes as Service Quotas lists
    them). P5 spot capacity counts against All P5 Spot Instance Requests, not the P4/P3/P2 one."""
    reference = yaml.safe_load((shared_schemas / "aws-ec2-vcpu-quotas" / "quotas.yaml").read_text())
    known = catalog("aws")
    for instance in known.instance_types.values():
        if not instance.gpus:
            continue
        for capacity in ("spot", "on-demand"):
            expected = reference_quota(reference[capacity], instance.name.split(".")[0])
            family = known.quota_families[capacity][instance.quota_family(capacity)]
            assert (family.name, family.code) == (expected["name"], expected["code"]), (
                f"{instance.name} {capacity}"
            )


def test_a_gpu_type_whose_quotas_group_differently_by_capacity_is_modelled_so():
    """P5: a Spot quota of its own, the On-Demand P quota shared with P4."""
    types = catalog("aws").instance_types
    p5, p4 = types["p5.48xlarge"], types["p4d.24xlarge"]
    assert p5.quota_family("spot") != p4.quota_family("spot")
    assert p5.quota_family("on-demand") == p4.quota_family("on-demand")


def test_every_gpu_type_has_a_quota_every_capacity_can_request():
    for instance in catalog("aws").instance_types.values():
        if instance.gpus:
            assert {
                ("spot", instance.quota_family("spot")),
                ("on-demand", instance.quota_family("on-demand")),
            } <= set(QUOTA_CODES), instance.name
    for instance in catalog("gcp").instance_types.values():
        if instance.gpus:
            family = instance.quota_family("spot")
            assert preemptible_gpu_quota_id(instance.gke_accelerator) == (
                f"PREEMPTIBLE-NVIDIA-{family}-GPUS-per-project-region"
            )


GPU_TYPE = {"vcpus": 4, "memory_gib": 16, "gpus": 1, "gpu_memory_gib": 16, "architecture": "x86_64"}


@pytest.mark.parametrize(
    ("cloud", "name", "fields", "expected"),
    [
        # A VT type: guessed from its first letter, it would have escaped the quota checks.
        (
            "aws",
            "vt9.xlarge",
            {"gpu": "u30"},
            "'vt9.xlarge': its instance family 'vt9' counts against no spot quota family",
        ),
        (
            "gcp",
            "z9-gpu-1g",
            {"gpu": "z9", "gke_accelerator": "nvidia-z9"},
            "'z9-gpu-1g': its accelerator 'nvidia-z9' has no preemptible GPU family",
        ),
    ],
)
def test_a_gpu_type_of_no_quota_family_is_an_error_naming_it(cloud, name, fields, expected):
    document = yaml.safe_load(CATALOG_FILE.read_text())[cloud]
    document["instance_types"][name] = {**GPU_TYPE, **fields}
    with pytest.raises(CatalogError) as caught:
        read_catalog(document)
    assert expected in str(caught.value) and "components/catalog.yaml" in str(caught.value)


def test_cli_refuses_a_template_that_fits_no_node_with_exit_2(program_copy):
    values = copy.deepcopy(stack_values("dev"))
    values["kubernetes"] = {"templates": {"gpus_per_node": 2}}
    result = spotctl_preview(program_copy("toobig", values), "toobig")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "spot-training:" in line]
    assert len(lines) == 1 and "spot-training:kubernetes.templates.gpus_per_node:" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("kueue", "path", "expected"),
    [
        ({"pods_ready_timeout": "11m"}, "pods_ready_timeout", "set at most 600s"),
        ({"recovery_timeout": "9m"}, "recovery_timeout", "set at least 600s"),
        ({"recovery_timeout": "20m"}, "recovery_timeout", "set below 1200s"),
    ],
)
def test_kueue_timeouts_must_agree_with_the_agents_wait_for_a_replacement(kueue, path, expected):
    """The agents wait twice the class's replacement_time (5m: 600 s) for their gang; Kueue's
    waitForPodsReady timeouts (Kueue's Configuration API, WaitForPodsReady: `timeout` from
    admission, `recoveryTimeout` from the last PodsReady=false after the pods ran) must
    requeue before a fresh agent gives up, and not before the survivors stop waiting."""
    (where, message) = only(
        "dev", lambda v: v.setdefault("kubernetes", {}).setdefault("kueue", {}).update(kueue)
    )
    assert where == f"kubernetes.kueue.{path}"
    assert "twice gpu_classes[0].replacement_time = 5m" in message and expected in message


def test_a_slower_class_replacement_lengthens_the_wait_kueue_must_allow():
    def slow(values):
        values["gpu_classes"][0]["replacement_time"] = "10m"

    (where, message) = only("dev", slow)
    assert where == "kubernetes.kueue.recovery_timeout"  # 15m, below the 20 min wait
    assert "wait 1200 s" in message and "set at least 1200s" in message
