"""The stack config schema: valid stacks load, bad input gets a clear error naming the field."""

from __future__ import annotations

import copy
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stack_files import REPO_ROOT, SPOTCTL, STACKS, spotctl_preview, stack_values, value_paths

from components.config import ConfigError, StackConfig, load_config


@pytest.mark.parametrize("stack", STACKS)
def test_repository_stacks_validate(stack):
    config = load_config(stack_values(stack))
    # Exactly the section of its cloud; the stack's name says which.
    assert (config.aws is not None, config.gcp is not None) == (
        config.cloud == "aws",
        config.cloud == "gcp",
    )
    assert config.cloud == ("gcp" if stack.startswith("gcp-") else "aws")


def test_prod_has_three_zones_and_two_teams():
    config = load_config(stack_values("prod"))
    assert len(config.zones) == 3 and len(config.teams) >= 2


def _set(tree: dict, path: list, value) -> dict:
    tree = copy.deepcopy(tree)
    node = tree
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return tree


def _error(values: dict) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(values, namespace="spot-training")
    return caught.value


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (["aws", "pools", "stable", "capacity_type"], "SPOT", "'ON_DEMAND'"),
        (["gpu_classes", 0, "instance_types"], [], "at least 1 item"),
        (["aws", "pools", "stable", "min_size"], 5, "min_size <= desired_size <= max_size"),
        (["teams", 0, "quotas"], {}, "at least 1 item"),
        (["aws", "gpu_ami", "alias"], "al2023@latest", "does not match"),
        (["teams", 0, "namespace"], "Team_A", "does not match"),
        (["aws", "checkpoint_storage", "abort_multipart_days"], 0, "greater than or equal to 1"),
        (
            ["aws", "checkpoint_storage", "transitions"],
            [{"days": 30, "storage_class": "DEEP_FREEZE"}],
            "'STANDARD_IA', 'INTELLIGENT_TIERING', 'GLACIER_IR' or 'GLACIER'",
        ),
        (["zones"], ["us-east-1a", "eu-west-1b"], "not zones of region 'us-east-1'"),
        (["cost_tags"], {"team": "x"}, "set by the platform"),
        (["aws", "principals", "platform_admin"], ["*"], "is not an IAM role or user ARN"),
        # An extended resource no device plugin of the platform advertises.
        (["kubernetes"], {"gpu_resource": "amd.com/gpu"}, "'nvidia.com/gpu'"),
    ],
)
def test_error_names_field_path_and_allowed_values(path, value, expected):
    error = _error(_set(stack_values("dev"), path, value))
    dotted = ".".join(str(p) for p in path if not isinstance(p, int))
    text = str(error)
    assert expected in text
    assert any(dotted.split(".")[0] in problem_path for problem_path, _ in error.problems)
    assert text.startswith("invalid stack config:")
    assert "spot-training:" in text


def test_unknown_field_is_named():
    values = stack_values("dev")
    values["gpu_classes"][0]["instance_type"] = "g5.xlarge"
    error = _error(values)
    unknown = "unknown field (check the spelling against the schema)"
    assert ("gpu_classes[0].instance_type", unknown) in error.problems


def test_each_cloud_needs_its_own_section_and_allowed_values_are_named():
    error = _error(_set(stack_values("dev"), ["cloud"], "gcp"))
    assert ("aws", "an AWS section in a 'gcp' stack; remove it") in error.problems
    assert ("gcp", "cloud 'gcp' needs this section") in error.problems
    error = _error(_set(stack_values("dev"), ["cloud"], "azure"))
    assert error.problems == [("cloud", "Input should be 'aws' or 'gcp'")]


def test_missing_cloud_section_and_both_cluster_modes():
    values = stack_values("dev")
    del values["aws"]
    assert ("aws", "cloud 'aws' needs this section") in _error(values).problems
    existing = {"name": "shared", "subnet_ids": ["subnet-0123456789abcdef0"]}
    values = _set(stack_values("dev"), ["aws", "cluster", "existing"], existing)
    assert ("aws.cluster", "set exactly one of 'create' or 'existing'") in _error(values).problems


def test_odd_keys_are_quoted_in_the_path():
    values = stack_values("dev")
    values["cost_tags"]["bad key!"] = "x"
    values["a.b"] = 1
    problems = dict(_error(values).problems)
    assert "cost_tags['bad key!']" in problems
    assert problems["['a.b']"].startswith("unknown field")


def test_existing_cluster_needs_a_subnet_per_zone():
    existing = {"name": "shared", "subnet_ids": ["subnet-0123456789abcdef0"]}
    values = _set(stack_values("prod"), ["aws", "cluster"], {"existing": existing})
    ((path, message),) = _error(values).problems
    assert path == "aws" and "subnet_ids: 1 subnets cannot cover the 3 zones" in message


def test_overlapping_team_prefixes_are_rejected():
    values = stack_values("prod")
    values["teams"][1]["checkpoint_prefix"] = "teams/vision/nested"
    assert "lies inside 'teams/vision'" in str(_error(values))


# --- fuzzing: any mutation of a valid config gives a StackConfig or a ConfigError naming a path.

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@st.composite
def mutated_configs(draw):
    values = stack_values(draw(st.sampled_from(STACKS)))
    paths = [p for p in value_paths(values) if p]
    path = draw(st.sampled_from(paths))
    action = draw(st.sampled_from(["replace", "delete", "add"]))
    parent = values
    for key in path[:-1]:
        parent = parent[key]
    if action == "delete":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        key = draw(st.text(min_size=1, max_size=8))
        parent[key] = draw(JUNK)
        path = (*path[:-1], key)
    else:
        parent[path[-1]] = draw(JUNK)
    return values, path


def _related(problem: tuple[str, str], mutated: tuple) -> bool:
    """The problem names the mutated top-level field: as its path, or, for a check that spans two
    fields (a quota against a pool limit), in its message beside the path of the other."""
    path, message = problem
    top = str(mutated[0])
    prefixes = (f"{top}.", f"{top}[", f"[{top!r}]")
    return path == top or path.startswith(prefixes) or any(p in message for p in prefixes)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_configs())
def test_fuzzed_configs_never_escape_as_tracebacks(case):
    values, path = case
    try:
        config = load_config(values, namespace="spot-training")
    except ConfigError as error:
        assert error.problems, "a ConfigError must list its problems"
        for problem_path, message in error.problems:
            assert problem_path and message
        assert any(_related(problem, path) for problem in error.problems), (path, error.problems)
        assert "Traceback" not in str(error)
    else:
        assert isinstance(config, StackConfig)


def test_cli_reports_config_error_without_traceback(program_copy):
    values = _set(stack_values("dev"), ["gpu_classes", 0, "instance_types", 1], "g6.xlarge")
    program = program_copy("broken", values)
    result = spotctl_preview(program, "broken")
    assert result.returncode == 2
    assert "spot-training:gpu_classes[0].instance_types[1]" in result.stderr
    assert "never mixes accelerator models" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_cli_reports_unknown_stack(tmp_path):
    result = subprocess.run(
        [SPOTCTL, "preview", "--stack", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 2
    assert "no stack 'nope'" in result.stderr and "dev" in result.stderr


# --- holes that once let a stack deploy something that could not work, each now one error line


@pytest.mark.parametrize(
    ("path", "value", "field", "expected"),
    [
        (["teams", 0, "namespace"], "kube-system", "teams[0].namespace", "belongs to Kubernetes"),
        (["teams", 0, "namespace"], "monitoring", "teams[0].namespace", "reserved: "),
        (["teams", 0, "namespace"], "kueue-system", "teams[0].namespace", "reserved: "),
        (
            ["aws", "alarms", "queue_age_seconds"],
            600,
            "aws.alarms.queue_age_seconds",
            "600 s can never fire: the interruption queue drops messages after 300 s",
        ),
        (["aws", "alarms", "gpu_idle_percent"], 100, "aws.alarms.gpu_idle_percent", "99"),
        (
            ["aws", "pools", "buffer", "schedule", 0, "recurrence"],
            "99 99 * * 1-5",
            "aws.pools.buffer.schedule[0].recurrence",
            "minute '99' is not a value or ascending range within 0-59",
        ),
        (
            ["aws", "pools", "buffer", "schedule", 1, "recurrence"],
            "0 19 * *",
            "aws.pools.buffer.schedule[1].recurrence",
            "not a cron expression of five fields",
        ),
        (
            ["aws", "pools", "buffer", "instance_types"],
            ["g6e.12xlarge", "m6i.large"],
            "aws.pools.buffer.instance_types",
            "one node group needs one AMI: do not mix CPU architectures or GPU and CPU types",
        ),
        (
            ["alerts", "runbook_base_url"],
            "https://github.com/example-org/spot-training-blueprint/blob/main",
            "alerts.runbook_base_url",
            "is a placeholder",
        ),
        (["alerts", "emails"], [], "alerts.emails", "at least 1 item"),
        (
            ["aws", "cluster", "create", "public_endpoint_cidrs"],
            ["0.0.0.0/0"],
            "aws.cluster.create.public_endpoint_cidrs",
            "opens the API endpoint to the whole internet",
        ),
        (
            ["aws", "cluster", "create", "public_endpoint_cidrs"],
            ["203.0.113.7/24"],
            "aws.cluster.create.public_endpoint_cidrs",
            "is not a network",
        ),
        (
            ["aws", "cluster", "create", "version"],
            "1.29",
            "aws.cluster.create.version",
            "has no pinned add-on versions in components/versions.py (pinned: 1.35)",
        ),
        (
            ["aws", "gpu_ami", "image_cache_snapshot"],
            "snap-0123456789abcdef0",
            "aws.gpu_ami",
            "image_cache_snapshot needs a bottlerocket alias, not 'al2023@",
        ),
        (
            ["aws", "spot_drill", "gpu_class"],
            "a100-40gb",
            "aws.spot_drill.gpu_class",
            "no GPU class 'a100-40gb' among gpu_classes[].name ('h100-80gb', 'l40s-48gb')",
        ),
        (
            ["aws", "spot_drill", "percent"],
            0,
            "aws.spot_drill.percent",
            "greater than or equal to 1",
        ),
        (
            ["kubernetes", "monitoring", "class_prices"],
            {"a100-40gb": {"on_demand": 4.1, "spot": 1.5}},
            "kubernetes.monitoring.class_prices['a100-40gb']",
            "no GPU class 'a100-40gb' among gpu_classes[].name ('h100-80gb', 'l40s-48gb')",
        ),
        (
            ["kubernetes", "monitoring", "class_prices", "h100-80gb", "spot"],
            9.5,
            "kubernetes.monitoring.class_prices.h100-80gb",
            "spot 9.5 must not exceed on_demand 6.88",
        ),
    ],
)
def test_each_hole_is_one_error_naming_its_field(path, value, field, expected):
    error = _error(_set(stack_values("prod"), path, value))
    ((problem_path, message),) = error.problems
    assert problem_path == field
    assert expected in message


def test_placeholder_runbook_links_are_refused_in_prod_only():
    example = "https://github.com/example-org/spot-training-blueprint/blob/main"
    dev = _set(stack_values("dev"), ["alerts", "runbook_base_url"], example)
    assert load_config(dev).alerts.runbook_base_url == example
    for stack in STACKS:
        assert "example" not in load_config(stack_values(stack)).alerts.runbook_base_url


@pytest.mark.parametrize(
    ("section", "field"),
    [
        (["alerts", "runbook_base_url"], "alerts.runbook_base_url"),
        (
            ["aws", "cluster", "create", "public_endpoint_cidrs"],
            "aws.cluster.create.public_endpoint_cidrs",
        ),
        (["aws", "principals", "break_glass"], "aws.principals.break_glass"),
    ],
)
def test_what_every_stack_must_state_is_required(section, field):
    values = stack_values("dev")
    parent = values
    for key in section[:-1]:
        parent = parent[key]
    del parent[section[-1]]
    assert (field, "required field is missing") in _error(values).problems


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    """The preview failed as bad input does: exit 2, no plan, one error naming the problem."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "to create" not in result.stdout
    return result.stderr.strip()


def test_unknown_top_level_key_stops_thespotctl_preview(program_copy, tmp_path):
    values = stack_values("dev")
    values["alert"] = {"emails": ["oncall@ml.test"]}  # `alerts` misspelt
    out = tmp_path / "plan.json"
    result = spotctl_preview(program_copy("typo", values), "typo", "--json", str(out))
    error = _one_line_error(result)
    assert "spot-training:alert: unknown field" in error
    assert not out.exists()


def test_yaml_syntax_error_is_one_line(program_copy):
    program = program_copy("broken", stack_values("dev"))
    stack_file = program / "stacks" / "Pulumi.broken.yaml"
    stack_file.write_text(
        stack_file.read_text().replace("spot-training:teams:", "spot-training:teams: [")
    )
    error = _one_line_error(spotctl_preview(program, "broken"))
    assert error.startswith(f"error: {stack_file}:")
    assert "not valid YAML" in error and len(error.splitlines()) == 1


def test_mixed_pool_is_a_config_error_not_a_traceback(program_copy):
    values = _set(
        stack_values("dev"),
        ["aws", "pools", "stable", "instance_types"],
        ["m6i.large", "g5.xlarge"],
    )
    error = _one_line_error(spotctl_preview(program_copy("mixed", values), "mixed"))
    assert "spot-training:aws.pools.stable.instance_types: one node group needs one AMI" in error
