"""The `gcp` config section: what a GCP stack accepts, and one clear line per bad field."""

from __future__ import annotations

import copy

import pytest
from stack_files import stack_values

from components.config import ConfigError, load_config
from components.config.gcp import (
    extended_grace_supported,
    gcs_bucket_name_problem,
    gke_version_key,
)
from spotctl.preview.resources import PreviewError, preview_program

GCP_PROD = stack_values("gcp-prod")


def problems(values: dict) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load_config(values)
    return caught.value.problems


def changed(path: str, value, base: dict = GCP_PROD) -> dict:
    """A copy of `base` with the dotted `path` set to `value` (None deletes it)."""
    values = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = values
    for part in parents:
        node = node[part]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return values


def test_the_gcp_stacks_validate():
    prod = load_config(GCP_PROD)
    assert prod.gcp.spot_shutdown.user_pods_seconds == 105
    attach = load_config(stack_values("gcp-dev"))
    assert attach.gcp.cluster.existing.name == "shared-dev"
    assert attach.gcp.spot_shutdown.user_pods_seconds == 15  # GKE's default: 15 of 30 s


def test_aws_stacks_still_validate_and_refuse_a_gcp_section():
    aws = stack_values("prod")
    assert load_config(aws).gcp is None
    assert problems({**aws, "gcp": GCP_PROD["gcp"]}) == [
        ("gcp", "a GCP section in an 'aws' stack; remove it")
    ]


@pytest.mark.parametrize(
    ("values", "path", "message"),
    [
        (
            changed("zones", ["us-central1-a", "us-east1-b"]),
            "zones",
            "zones ['us-east1-b'] are not zones of region 'us-central1'",
        ),
        (changed("region", "us-west-2x"), "region", "'us-west-2x' is not a GCP region"),
        (
            changed("gcp.checkpoint_storage", {"bucket_name": "my-google-checkpoints"}),
            "gcp.checkpoint_storage.bucket_name",
            "a GCS bucket name must not start with 'goog' or contain 'google'",
        ),
        (
            changed("gcp.checkpoint_storage", {"bucket_name": "Checkpoints"}),
            "gcp.checkpoint_storage.bucket_name",
            "must use lowercase letters",
        ),
        (
            changed("gcp.spot_shutdown", {"seconds": 180}),
            "gcp.spot_shutdown.seconds",
            "180 s: GKE accepts a Spot node's shutdown grace of 0, 30 or 120 s only",
        ),
        # Within GKE's old range (10-120) but no value GKE's node system configuration takes: it
        # would preview clean and fail at `pulumi up`.
        (
            changed("gcp.spot_shutdown", {"seconds": 60}),
            "gcp.spot_shutdown.seconds",
            "60 s: GKE accepts a Spot node's shutdown grace of 0, 30 or 120 s only",
        ),
        (
            changed("gcp.spot_shutdown", {"seconds": 0, "critical_pods_seconds": 0}),
            "gcp.spot_shutdown.seconds",
            "0 turns graceful shutdown off (no final save); use 30 or 120",
        ),
        (
            changed("gcp.spot_shutdown", {"seconds": 30, "critical_pods_seconds": 30}),
            "gcp.spot_shutdown",
            "critical_pods_seconds 30 leaves user pods nothing of the 30 s",
        ),
        (
            changed("gcp.cluster.create.version", "1.34"),
            "gcp.spot_shutdown",
            "seconds 120 needs GKE 1.35.0-gke.1171000 or later; cluster version '1.34' allows "
            "at most 30",
        ),
        (
            changed("gcp.cluster", {"existing": {"name": "shared", "version": "1.35"}}),
            "gcp.spot_shutdown",
            "cluster version '1.35' allows at most 30 (the nodes of an existing cluster may run "
            "any patch of its minor: set gcp.cluster.existing.version to their exact version)",
        ),
        (
            changed("aws", stack_values("prod")["aws"]),
            "aws",
            "an AWS section in a 'gcp' stack; remove it",
        ),
        (changed("gcp", None), "gcp", "cloud 'gcp' needs this section"),
        (
            changed("cost_tags", {"CostCenter": "ML Platform"}),
            "cost_tags",
            "tags ['CostCenter'] are not GCP labels",
        ),
        (
            changed("gcp.spot_gpu_quota", {"nvidia-h100": 8}),
            "gcp.spot_gpu_quota",
            "unknown accelerator type(s) ['nvidia-h100']",
        ),
        (
            changed("kubernetes", {"notice_seconds": 110}),
            "gcp",
            "kubernetes.notice_seconds 110 exceeds the 105 s",
        ),
        (
            changed("gcp.cluster.create.network", {"pods_cidr": "10.8.0.0/13"}),
            "gcp.cluster.create.network",
            "nodes_cidr 10.10.0.0/20 overlaps pods_cidr 10.8.0.0/13",
        ),
        (
            changed("gcp.cluster.create.network", {"pods_cidr": "10.10.0.0/14"}),
            "gcp.cluster.create.network.pods_cidr",
            "'10.10.0.0/14' is not an IPv4 network (10.10.0.0/14 has host bits set)",
        ),
        (
            changed("gcp.cluster.create.network", {"services_cidr": "8.8.0.0/20"}),
            "gcp.cluster.create.network.services_cidr",
            "'8.8.0.0/20' is not a private (RFC 1918) range",
        ),
        (
            changed("gcp.cluster.existing", {"name": "other", "version": "1.35"}),
            "gcp.cluster",
            "set exactly one of 'create' or 'existing'",
        ),
        (
            changed("gcp.groups.platform_admin", ["platform-admins@example.com"]),
            "gcp.groups.platform_admin[0]",
            "does not match",
        ),
        (
            changed("gcp.groups.team_engineers", {"robotics": ["group:r@example.com"]}),
            "gcp",
            "groups.team_engineers names teams ['robotics'] that are not in teams[].name",
        ),
        (
            changed("gcp.cluster.create.rbac_security_group", None),
            "gcp.groups",
            "RoleBindings name Google Groups (group:auditors@example.com, "
            "group:security@example.com, group:ml-vision@example.com, "
            "group:ml-language@example.com), which GKE matches only with Google Groups for RBAC: "
            "set gcp.cluster.create.rbac_security_group to gke-security-groups@<your domain>",
        ),
        (
            changed("gcp.project", "Spot_Training"),
            "gcp.project",
            "does not match",
        ),
        # The alert fires below 100 - the share's utilisation: at 100 it never would.
        (changed("gcp.alarms.gpu_idle_percent", 100), "gcp.alarms.gpu_idle_percent", "99"),
    ],
)
def test_bad_input_names_its_field(values, path, message):
    (problem,) = problems(values)
    assert problem[0] == path and message in problem[1], problem


def with_class(index: int, **fields) -> dict:
    """gcp-prod with fields of one GPU class changed (None drops one); no team quota of that
    class, so a smaller class is still within its quotas."""
    values = copy.deepcopy(GCP_PROD)
    name = values["gpu_classes"][index]["name"]
    for team in values["teams"]:
        team["quotas"].pop(name, None)
    values["teams"] = [team for team in values["teams"] if team["quotas"]]
    gpu_class = values["gpu_classes"][index]
    for key, value in fields.items():
        if value is None:
            gpu_class.pop(key, None)
        else:
            gpu_class[key] = value
    return values


H100 = 1  # gcp-prod's h100-80gb class, offered in us-central1-a and -c only


@pytest.mark.parametrize(
    ("values", "path", "message"),
    [
        (
            with_class(H100, zones=["us-central1-a", "us-central1-b"]),
            "gpu_classes[1].zones[1]",
            "'us-central1-b' does not offer the GPUs of class 'h100-80gb': nvidia-h100-80gb is "
            "offered in us-central1 only in ['us-central1-a', 'us-central1-c']",
        ),
        (
            with_class(H100, zones=None),
            "gpu_classes[1].zones",
            "not set, so class 'h100-80gb' spans the stack's zones, but nvidia-h100-80gb",
        ),
        (
            with_class(H100, zones=["us-central1-f"]),
            "gpu_classes",
            "class 'h100-80gb': zones ['us-central1-f'] are not among the stack's zones",
        ),
        (
            with_class(H100, spot_gpus=4, on_demand_gpus=0),
            "gpu_classes[1].spot_gpus",
            "4 GPUs cannot hold one node of the class: its smallest machine type has 8",
        ),
        (
            with_class(H100, instance_types=["a3-highgpu-4g"]),
            "gpu_classes[1].instance_types[0]",
            "unknown instance type 'a3-highgpu-4g'",
        ),
        (
            changed("gcp.stable_pool.machine_type", "g2-standard-8"),
            "gcp.stable_pool.machine_type",
            "'g2-standard-8' has GPUs; the stable pool runs none",
        ),
        (
            changed("gcp.stable_pool.machine_type", "n9-standard-8"),
            "gcp.stable_pool.machine_type",
            "unknown instance type 'n9-standard-8'",
        ),
    ],
)
def test_capacity_the_catalog_cannot_back_is_refused(values, path, message):
    (problem,) = problems(values)
    assert problem[0] == path and message in problem[1], problem


def with_buffer(**fields) -> dict:
    """gcp-prod with fields of its buffer pool changed (None drops one)."""
    values = copy.deepcopy(GCP_PROD)
    buffer = values["gcp"]["buffer_pool"]
    for key, value in fields.items():
        if value is None:
            buffer.pop(key, None)
        else:
            buffer[key] = value
    return values


NIGHT = {"name": "training-night", "recurrence": "0 19 * * 1-5", "nodes_per_zone": 2}


@pytest.mark.parametrize(
    ("values", "path", "message"),
    [
        (
            with_buffer(zones=["us-central1-a", "us-east1-b"]),
            "gcp.buffer_pool.zones[1]",
            "'us-east1-b' is not among the stack's zones (zones[] = ['us-central1-a', "
            "'us-central1-b', 'us-central1-c'])",
        ),
        (
            with_buffer(machine_type="a3-highgpu-8g", zones=["us-central1-a", "us-central1-b"]),
            "gcp.buffer_pool.zones[1]",
            "'us-central1-b' does not offer the GPUs of the buffer pool (a3-highgpu-8g): "
            "nvidia-h100-80gb is offered in us-central1 only in ['us-central1-a', "
            "'us-central1-c']",
        ),
        (
            with_buffer(machine_type="a3-highgpu-8g", zones=None),
            "gcp.buffer_pool.zones",
            "not set, so the buffer pool (a3-highgpu-8g) spans the stack's zones, but "
            "nvidia-h100-80gb is offered",
        ),
        (
            with_buffer(machine_type="a2-highgpu-4g"),
            "gcp.buffer_pool.machine_type",
            "its GPUs (a100 40 GB) are of no class in gpu_classes[].name: add 'a100-40gb'",
        ),
        (
            with_buffer(machine_type="g2-standard-64"),
            "gcp.buffer_pool.machine_type",
            "unknown instance type 'g2-standard-64'",
        ),
        (
            with_buffer(schedule=[NIGHT, {**NIGHT, "nodes_per_zone": 0}]),
            "gcp.buffer_pool.schedule",
            "schedule action names must be unique; repeated: ['training-night']",
        ),
        (
            with_buffer(schedule=[{**NIGHT, "recurrence": "0 25 * * 1-5"}]),
            "gcp.buffer_pool.schedule[0].recurrence",
            "'0 25 * * 1-5': hour '25' is not a value or ascending range within 0-23",
        ),
        (
            with_buffer(schedule=[{**NIGHT, "time_zone": "America/Springfield"}]),
            "gcp.buffer_pool.schedule[0].time_zone",
            "'America/Springfield' is not a tz database time zone",
        ),
        (
            with_buffer(schedule=[{**NIGHT, "nodes_per_zone": -1}]),
            "gcp.buffer_pool.schedule[0].nodes_per_zone",
            "greater than or equal to 0",
        ),
        (
            with_buffer(schedule=[]),
            "gcp.buffer_pool.schedule",
            "at least 1 item",
        ),
    ],
)
def test_bad_buffer_input_names_its_field(values, path, message):
    (problem,) = problems(values)
    assert problem[0] == path and message in problem[1], problem


def test_a_cpu_buffer_needs_no_class_and_any_zone_of_the_stack_will_do():
    config = load_config(with_buffer(machine_type="n2-standard-16", zones=None))
    assert config.gcp.buffer_pool.pool_zones(config.zones) == config.zones


def test_gke_versions_order_and_the_extended_grace_threshold():
    assert gke_version_key("1.35") < gke_version_key("1.35.0-gke.1171000")
    assert gke_version_key("1.35.0-gke.1170999") < gke_version_key("1.35.0-gke.1171000")
    assert gke_version_key("1.35.1-gke.100") > gke_version_key("1.35.0-gke.1171000")
    # A new cluster on a bare minor gets its newest patch; an existing one may run any patch.
    assert extended_grace_supported("1.35", new_cluster=True)
    assert not extended_grace_supported("1.34", new_cluster=True)
    assert not extended_grace_supported("1.35", new_cluster=False)
    assert extended_grace_supported("1.36", new_cluster=False)
    assert not extended_grace_supported("1.35.0-gke.1170999", new_cluster=True)
    with pytest.raises(ValueError, match="not a GKE version"):
        gke_version_key("v1.35")


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("spot-training-checkpoints", False),
        ("a.b_c-1", False),
        ("ab", True),
        ("-leading", True),
        ("192.168.5.4", True),
        ("goog-checkpoints", True),
        ("x" * 64, True),
        (".".join(["x" * 63] * 3), False),
    ],
)
def test_gcs_bucket_names(name, refused):
    assert (gcs_bucket_name_problem(name) is not None) == refused


def test_a_bad_stack_stops_the_preview_with_one_line(program_copy):
    values = changed("zones", ["us-central1-a", "europe-west4-a"])
    with pytest.raises(PreviewError) as caught:
        preview_program(program_copy("bad", values), "bad")
    assert not caught.value.crashed
    assert str(caught.value).splitlines() == [
        "invalid stack config:",
        "  spot-training:zones: zones ['europe-west4-a'] are not zones of region 'us-central1'",
    ]


def test_a_bad_buffer_stops_the_preview_with_one_line(program_copy):
    values = with_buffer(schedule=[NIGHT, NIGHT])
    with pytest.raises(PreviewError) as caught:
        preview_program(program_copy("bad", values), "bad")
    assert not caught.value.crashed
    assert str(caught.value).splitlines() == [
        "invalid stack config:",
        "  spot-training:gcp.buffer_pool.schedule: schedule action names must be unique; "
        "repeated: ['training-night']",
    ]
