"""Hostile stack files: each one loads, or is refused with one line per problem naming its field
(exit 2 from the CLI); never a traceback, never a setting silently dropped.

The limits are the clouds' own: S3 bucket names from the S3 User Guide ("General purpose bucket
naming rules"), tags from AWS's "Tag restrictions" (keys 128 and values 256 characters, no `aws:`
prefix), STANDARD_IA transitions from the S3 API reference ("Transition": 30 days at the earliest),
GKE's 1,000 nodes per node pool and zone (GKE quotas and limits), the smallest VPC subnet range
(/29), the two minutes of an EC2 spot interruption notice.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stack_files import REPO_ROOT, STACKS, spotctl_preview, stack_values, value_paths

from components.config import ConfigError, StackConfig, load_values
from components.config.files import ProgramInputError, stack_config

PROJECT = "spot-training"


def load_stack_file(path: Path) -> StackConfig:
    """What the program makes of a stack file, short of the engine: the file as the CLI reads it,
    then the keys as Pulumi hands them to the program."""
    values, secret_keys = stack_config(path, PROJECT)
    return load_values(values, PROJECT, secret_keys)


def stack_text(values: dict, extra: str = "") -> bytes:
    config = {f"{PROJECT}:{key}": value for key, value in values.items()}
    text = yaml.safe_dump({"config": config}, allow_unicode=True, width=1000)
    return (text + extra).encode()


def mutated(stack: str, path: list, value) -> bytes:
    values = copy.deepcopy(stack_values(stack))
    node = values
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    node[path[-1]] = value
    return stack_text(values)


def refusal(path: Path) -> str:
    """The error a bad stack file gets, checked to be one line per problem, each naming where."""
    with pytest.raises((ConfigError, ProgramInputError)) as caught:
        load_stack_file(path)
    error, text = caught.value, str(caught.value)
    if isinstance(error, ProgramInputError):
        assert len(text.splitlines()) == 1 and text.startswith(str(path)), text
    else:
        assert error.problems, text
        assert len(text.splitlines()) == 1 + len(error.problems), text
        assert all(where and message for where, message in error.problems), text
    return text


def write(tmp_path: Path, document: bytes) -> Path:
    path = tmp_path / "Pulumi.hostile.yaml"
    path.write_bytes(document)
    return path


DEV_TEXT = stack_text(stack_values("dev"))
GPUS = ["gpu_classes", 0, "spot_gpus"]
TEAM_ARN = "arn:aws:iam::111122223333:role/MLEngineers"

# Each once ended in a traceback; now one line naming the field or the place in the file.
ONCE_TRACEBACKS = {
    "vpc_cidr that passes the pattern": (
        mutated("dev", ["aws", "cluster", "create", "vpc_cidr"], "10.999.0.0/16"),
        "spot-training:aws.cluster.create.vpc_cidr: '10.999.0.0/16' is not an IPv4 network",
    ),
    "a key that is not a string": (DEV_TEXT + b"  yes: 1\n", "config key True is not a string"),
    "a GCP environment starting with a digit": (
        mutated("gcp-dev", ["environment"], "9dev"),
        "spot-training:environment: '9dev' cannot name GCP service accounts",
    ),
    "a GCP environment of 63 characters": (
        mutated("gcp-dev", ["environment"], "e" * 63),
        "spot-training:environment: 'eeee",
    ),
    "10^400 GPUs": (
        mutated("dev", GPUS, 10**400),
        "spot-training:gpu_classes[0].spot_gpus: integer out of range",
    ),
    "an integer of 5000 digits": (
        DEV_TEXT.replace(b"spot_gpus: 4", b"spot_gpus: " + b"9" * 5000, 1),
        "not a config: Exceeds the limit (4300 digits)",
    ),
    "invalid UTF-8": (DEV_TEXT.replace(b"research", b"r\xffsearch", 1), "not UTF-8 text"),
    "lists nested 3000 deep": (
        DEV_TEXT + b"  spot-training:x: " + b"[" * 3000 + b"]" * 3000 + b"\n",
        "nested too deeply",
    ),
}


@pytest.mark.parametrize("case", ONCE_TRACEBACKS)
def test_what_once_crashed_is_one_line(case, tmp_path):
    document, expected = ONCE_TRACEBACKS[case]
    assert expected in refusal(write(tmp_path, document))


# Each was once accepted although the cloud, Kueue or the platform would refuse or ignore it.
ONCE_ACCEPTED = {
    "a misspelt project namespace": (
        DEV_TEXT + b"  spot-trainig:kubernetes: {}\n",
        "spot-trainig:kubernetes: unknown namespace 'spot-trainig'",
    ),
    "a namespace with an underscore": (
        DEV_TEXT + b"  spot_training:cost_tags: {a: b}\n",
        "spot_training:cost_tags: unknown namespace",
    ),
    "a key written twice": (
        DEV_TEXT + b"  spot-training:region: us-east-2\n",
        "key 'spot-training:region' appears twice in one mapping",
    ),
    "AWS engineers in a GCP stack": (
        mutated("gcp-dev", ["teams", 0, "engineers"], [TEAM_ARN]),
        "spot-training:teams: teams[0].engineers: IAM role ARNs grant nothing on GCP",
    ),
    "a wildcard principal among a team's engineers": (
        mutated("dev", ["teams", 0, "engineers"], ["arn:aws:iam::111122223333:role/*"]),
        "spot-training:teams[0].engineers[0]: 'arn:aws:iam::111122223333:role/*' is not an IAM "
        "role or user ARN",
    ),
    "a wildcard GCP member": (
        mutated("gcp-dev", ["gcp", "groups", "log_reader"], ["user:*@example.com"]),
        "spot-training:gcp.groups.log_reader[0]: 'user:*@example.com' does not match",
    ),
    "a notice longer than AWS gives": (
        mutated("dev", ["kubernetes", "notice_seconds"], 3600),
        "spot-training:kubernetes: notice_seconds 3600 exceeds the 120 s",
    ),
    "a template Kueue can never admit": (
        mutated("dev", ["kubernetes", "templates"], {"min_nodes": 50, "max_nodes": 50}),
        "spot-training:kubernetes.templates.max_nodes: a multi-node template of 50 nodes",
    ),
    "a Kueue backoff base above its max": (
        mutated("dev", ["kubernetes", "kueue", "backoff_base_seconds"], 1000),
        "spot-training:kubernetes.kueue: backoff_base_seconds 1000 exceeds",
    ),
    "a ready timeout of 0s": (
        mutated("dev", ["kubernetes", "kueue", "pods_ready_timeout"], "0s"),
        "spot-training:kubernetes.kueue.pods_ready_timeout: '0s' requeues",
    ),
    "an infinite price": (
        mutated("dev", ["kubernetes", "monitoring", "on_demand_gpu_hour_usd"], float("inf")),
        "spot-training:kubernetes.monitoring.on_demand_gpu_hour_usd: Input should be a finite",
    ),
    "a GKE buffer of 10,000 nodes per zone": (
        mutated("gcp-prod", ["gcp", "buffer_pool", "schedule", 1, "nodes_per_zone"], 10000),
        "spot-training:gcp.buffer_pool.schedule[1].nodes_per_zone: Input should be less than "
        "or equal to 1000",
    ),
    "an AWS buffer schedule above the pool's max": (
        mutated("prod", ["aws", "pools", "buffer", "schedule", 1, "max_size"], 40),
        "spot-training:aws.pools.buffer.schedule: action 'training-night' raises the group to "
        "max_size 40, above the pool's max_size 4",
    ),
    "STANDARD_IA at 1 day": (
        mutated(
            "dev",
            ["aws", "checkpoint_storage", "transitions"],
            [{"days": 1, "storage_class": "STANDARD_IA"}],
        ),
        "spot-training:aws.checkpoint_storage.transitions[0]: S3 moves objects to STANDARD_IA "
        "at 30 days at the earliest",
    ),
    "a tag value over 256 characters": (
        mutated("dev", ["cost_tags", "cost-center"], "x" * 257),
        "spot-training:cost_tags.cost-center: String should have at most 256 characters",
    ),
    "an aws: tag key": (
        mutated("dev", ["cost_tags", "aws:owner"], "me"),
        "spot-training:cost_tags: tags ['aws:owner']: the 'aws:' prefix is reserved",
    ),
    "a /30 GKE node range": (
        mutated("gcp-prod", ["gcp", "cluster", "create", "network", "nodes_cidr"], "10.10.0.0/30"),
        "spot-training:gcp.cluster.create.network.nodes_cidr: '10.10.0.0/30' is too small",
    ),
    "SMTP port 99999": (
        mutated("gcp-dev", ["gcp", "alert_email", "smarthost"], "smtp.example.com:99999"),
        "spot-training:gcp.alert_email.smarthost: 'smtp.example.com:99999': port 99999",
    ),
    "a GKE authorized network of the whole internet": (
        mutated(
            "gcp-prod",
            ["gcp", "cluster", "create", "authorized_networks"],
            [{"name": "anyone", "cidr": "0.0.0.0/0"}],
        ),
        "authorized_networks[0].cidr: '0.0.0.0/0' opens the control plane to the whole internet",
    ),
} | {
    f"S3 bucket name {name}": (
        mutated("dev", ["aws", "checkpoint_storage", "bucket_name"], name),
        f"spot-training:aws.checkpoint_storage.bucket_name: {name!r}: an S3 bucket name {rule}",
    )
    for name, rule in [
        ("my..bucket", "must not contain two adjacent periods"),
        ("192.168.5.4", "must not be formatted as an IP address"),
        ("xn--bucket", "must not use the reserved 'xn--'"),
        ("checkpoints-s3alias", "must not use the reserved '-s3alias'"),
    ]
}


@pytest.mark.parametrize("case", ONCE_ACCEPTED)
def test_what_was_once_accepted_is_refused_naming_its_field(case, tmp_path):
    document, expected = ONCE_ACCEPTED[case]
    assert expected in refusal(write(tmp_path, document))


@pytest.mark.parametrize(
    ("stack", "document", "check"),
    [
        ("dev", DEV_TEXT.replace(b"environment: dev", b"environment: 'true'"), "environment"),
        ("dev", mutated("dev", ["aws", "checkpoint_storage", "bucket_name"], "ml.ckpt-1"), None),
        (
            "dev",
            mutated(
                "dev",
                ["aws", "checkpoint_storage", "transitions"],
                [{"days": 30, "storage_class": "STANDARD_IA"}],
            ),
            None,
        ),
        ("dev", mutated("dev", ["cost_tags", "cost-center"], "ä" * 256), None),
        ("gcp-dev", mutated("gcp-dev", ["environment"], "e" * 38), None),
        (
            "gcp-prod",
            mutated(
                "gcp-prod", ["gcp", "cluster", "create", "network", "nodes_cidr"], "10.10.0.0/29"
            ),
            None,
        ),
    ],
)
def test_valid_edges_load(stack, document, check, tmp_path):
    config = load_stack_file(write(tmp_path, document))
    if check:
        assert getattr(config, check) == "true"  # quoted in the file: text, not a boolean


@pytest.mark.parametrize(
    # One the CLI's reading of the file refuses, one the program refuses.
    "case",
    ["a key written twice", "a misspelt project namespace"],
)
def test_cli_refuses_with_exit_2_and_one_line(case, tmp_path):
    document, expected = (ONCE_ACCEPTED | ONCE_TRACEBACKS)[case]
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "__main__.py").symlink_to(REPO_ROOT / "__main__.py")
    (tmp_path / "stacks").mkdir()
    write(tmp_path / "stacks", document)
    result = spotctl_preview(tmp_path, "hostile")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert expected in result.stderr
    assert "to create" not in result.stdout


# --- fuzzing: any hostile edit of any stack file loads or is refused, one line per problem.

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([10**400, -(10**30), 2**53, 2**63, 0, -1]),
    st.floats(),
    st.text(max_size=300),
    st.sampled_from(["0.0.0.0/0", "true", "10.999.0.0/16", "my..bucket", "aws:x", "0s", ""]),
    st.lists(st.integers(), max_size=3),
    st.integers(min_value=17, max_value=40).map(lambda depth: eval("[" * depth + "]" * depth)),
    st.dictionaries(
        st.one_of(st.text(max_size=5), st.integers(), st.booleans()), st.integers(), max_size=2
    ),
)


@st.composite
def hostile_documents(draw) -> bytes:
    stack = draw(st.sampled_from(STACKS))
    values = copy.deepcopy(stack_values(stack))
    path = draw(st.sampled_from([p for p in value_paths(values) if p]))
    parent = values
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(["replace", "delete", "add", "namespace", "text"]))
    if action == "replace":
        parent[path[-1]] = draw(HOSTILE)
    elif action == "delete":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.one_of(st.text(max_size=8), st.integers()))] = draw(HOSTILE)
    document = stack_text(values)
    if action == "namespace":
        namespace = draw(st.sampled_from(["spot-trainig", "spot_training", "aws", "Spot-training"]))
        document = document.replace(
            f"{PROJECT}:{path[0]}:".encode(), f"{namespace}:{path[0]}:".encode()
        )
    if action == "text":
        lines = document.splitlines(keepends=True)
        index = draw(st.integers(min_value=1, max_value=len(lines) - 1))
        edit = draw(st.sampled_from(["duplicate", "bytes", "cut"]))
        if edit == "duplicate":
            lines.insert(index, lines[index])
        elif edit == "bytes":
            lines[index] = (
                lines[index][:4] + draw(st.binary(min_size=1, max_size=4)) + lines[index][4:]
            )
        else:
            lines = lines[:index] + [lines[index][: len(lines[index]) // 2]]
        document = b"".join(lines)
    return document


TALLY = {"cases": 0, "loaded": 0, "refused": 0}


@settings(
    max_examples=300,
    deadline=2000,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(hostile_documents())
def test_fuzzed_stack_files_load_or_are_refused_in_one_line_each(document):
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), document)
        TALLY["cases"] += 1
        try:
            load_stack_file(path)
        except (ConfigError, ProgramInputError):
            refusal(path)
            TALLY["refused"] += 1
        else:
            TALLY["loaded"] += 1


def test_fuzz_tally():
    """How many files the fuzz generated, for the record (`-s` shows it; it runs after the fuzz,
    in file order)."""
    if TALLY["cases"]:
        print(
            f"\nconfig fuzz: {TALLY['cases']} stack files, {TALLY['loaded']} loaded, "
            f"{TALLY['refused']} refused in one line per problem, 0 tracebacks"
        )
        assert TALLY["cases"] == TALLY["loaded"] + TALLY["refused"]
