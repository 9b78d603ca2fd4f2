"""`spotctl plan` on several nodes: the memory tier beside the durable one, its costs from the
stated inputs (a rank's copy into host memory, the node's network under the cloud's one-flow
limit, the share of failures it survives), each overridable and refused in one line when bad;
on one node, one line saying it needs two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from stack_files import REPO_ROOT
from typer.testing import CliRunner

from spotctl.cli import app
from spotctl.plan import Inputs, scenario
from spotctl.plan.model import MemoryTier, two_tiers
from spotctl.provider_data import DATA_FILE

JOB = ["--step-s", "1", "--job-hours", "24", "--interruptions-per-hour", "0.05"]
H100 = ["--stack", "prod", "--class", "h100-80gb", "--nodes", "4", "--step-s", "2"]


@pytest.fixture(autouse=True)
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)


def plan(tmp_path: Path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["plan", *args, "--json", str(out)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), " ".join(result.output.split())


def test_one_node_says_the_memory_tier_needs_two(tmp_path: Path) -> None:
    result, printed = plan(tmp_path, "--cloud", "aws", "--state-gb", "10", *JOB)
    assert result["memory_tier"] == {
        "applies": False,
        "why": "needs 2+ nodes: each rank's copy is kept on a peer node",
    }
    assert "Memory tier: needs 2+ nodes" in printed and "Two tiers" not in printed


@pytest.mark.parametrize(
    ("cloud", "send_gbps"),
    [("aws", 5.0), ("gcp", 8.0)],  # EC2 caps a rank's one TCP flow at 5 Gbps; GCP states none
)
def test_the_memory_save_costs_what_its_inputs_say(
    tmp_path: Path, cloud: str, send_gbps: float
) -> None:
    flags = ["--memory-rank-gb", "2", "--memory-copy-gb-per-s", "4", "--peer-gbps", "8"]
    args = ["--cloud", cloud, "--state-gb", "10", "--nodes", "2", *JOB, *flags]
    result, printed = plan(tmp_path, *args, "--memory-survives", "0.8")
    tiers = result["memory_tier"]
    copy_s = 2 / 4
    assert tiers["memory_blocked_s"] == pytest.approx(copy_s)
    # Held by the peer once the staged copy is in the tmpfs and sent: one rank on a node here.
    assert tiers["memory_save_s"] == pytest.approx(2 * copy_s + 2 * 8 / send_gbps)
    # The figures are the model's two tiers for the job the plan made.
    job = scenario(
        Inputs(
            cloud=cloud,
            step_s=1,
            job_hours=24,
            state_gb=10,
            nodes=2,
            interruptions_per_hour=0.05,
        )
    ).job
    expected = two_tiers(job, MemoryTier(tiers["memory_blocked_s"], tiers["memory_save_s"], 0.8))
    assert tiers["memory_interval_s"] == pytest.approx(expected.memory_interval_s)
    assert tiers["durable_interval_s"] == pytest.approx(expected.durable_interval_s)
    assert tiers["lost_per_failure_s"] == pytest.approx(expected.lost_per_failure_s)
    assert tiers["badput"] == pytest.approx(expected.badput)
    assert tiers["durable_only_badput"] == pytest.approx(expected.durable_only_badput)
    assert tiers["durable_only_interval_s"] == pytest.approx(result["interval_s"])
    assert tiers["pays"] == (expected.badput < expected.durable_only_badput)
    a = result["assumptions"]
    for key in ("memory_rank_gb", "memory_copy_gb_per_s", "peer_gbps", "memory_survives"):
        assert a[f"{key}_source"] == f"--{key.replace('_', '-')}"
    assert "Two tiers" in printed and "80% of failures without a notice" in printed


def test_a_class_states_its_network_and_a_rank_keeps_its_shard(tmp_path: Path) -> None:
    # 200 GB fits no 80 GiB GPU: sharded over 4 nodes x 8 GPUs (FSDP), 6.25 GB a rank; eight
    # ranks a node, one flow each. A memory save blocks what the node's durable snapshot does.
    sharded, printed = plan(tmp_path, *H100, "--state-gb", "200", "--job-hours", "72")
    a, tiers = sharded["assumptions"], sharded["memory_tier"]
    assert a["memory_rank_gb"] == pytest.approx(6.25)
    assert "its shard: the state does not fit one GPU, sharded over 32" in printed
    assert (a["peer_gbps"], a["memory_ranks_per_node"], a["flow_gbps"]) == (3200, 8, 5.0)
    assert a["peer_gbps_source"] == "provider-data.yaml: p5.48xlarge's, as published"
    assert "docs.aws.amazon.com/ec2/latest/instancetypes/ac.html" in a["peer_gbps_read_from"]
    assert tiers["memory_blocked_s"] == pytest.approx(tiers["durable_blocked_s"])
    assert tiers["memory_save_s"] == pytest.approx(2 * 8 * 6.25 / 10 + 8 * 6.25 * 8 / 40)
    assert tiers["host_memory_gb_per_node"] == pytest.approx(7 * 8 * 6.25)
    # Uploads short against the interval: the tier's blocking outweighs what it keeps.
    assert not tiers["pays"] and tiers["badput"] > tiers["durable_only_badput"]
    # Uploads of 600 s and a failure in 20 node-hours: it pays.
    slow, _ = plan(
        tmp_path, *H100, "--state-gb", "200", "--job-hours", "72",
        "--failures-per-hour", "0.05", "--save-s", "600",
    )  # fmt: skip
    tiers = slow["memory_tier"]
    assert tiers["lost_per_failure_s"] < tiers["durable_only_lost_per_failure_s"]
    assert tiers["badput"] < tiers["durable_only_badput"] and tiers["pays"]
    # A state one GPU holds is replicated (DDP): each rank keeps it whole.
    whole, _ = plan(tmp_path, *H100, "--state-gb", "40", "--job-hours", "72")
    assert whole["assumptions"]["memory_rank_gb"] == pytest.approx(40)


def test_a_memory_tier_that_survives_nothing_does_not_pay(tmp_path: Path) -> None:
    args = ["--cloud", "aws", "--state-gb", "10", "--nodes", "2", *JOB]
    tiers = plan(tmp_path, *args, "--memory-survives", "0")[0]["memory_tier"]
    assert tiers["lost_per_failure_s"] == tiers["durable_only_lost_per_failure_s"]
    assert not tiers["pays"]


def test_a_type_without_a_network_figure_asks_for_one(tmp_path: Path) -> None:
    document = yaml.safe_load(DATA_FILE.read_text())
    del document["network"]["aws"]["gbps"]["p5.48xlarge"]
    table = tmp_path / "provider-data.yaml"
    table.write_text(yaml.safe_dump(document))
    args = ["plan", *H100, "--state-gb", "200", "--job-hours", "72", "--memory-rank-gb", "6"]
    result = CliRunner().invoke(app, [*args, "--provider-data", str(table)])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --class h100-80gb: the provider data table has no network figure for "
        "p5.48xlarge; add it, or pass --peer-gbps\n"
    )
    given = plan(tmp_path, *args[1:], "--provider-data", str(table), "--peer-gbps", "100")[0]
    assert given["assumptions"]["peer_gbps_source"] == "--peer-gbps"


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--memory-survives", "1.5", "--memory-survives must be a share from 0 to 1, not 1.5"),
        ("--memory-survives", "-0.1", "--memory-survives must be a share from 0 to 1, not -0.1"),
        ("--peer-gbps", "0", "--peer-gbps must be a positive number, not 0"),
        ("--memory-copy-gb-per-s", "-2", "--memory-copy-gb-per-s must be a positive number"),
        ("--memory-rank-gb", "nan", "--memory-rank-gb must be a positive number, not nan"),
    ],
)
def test_a_bad_memory_tier_input_is_refused_in_one_line(
    flag: str, value: str, message: str
) -> None:
    args = ["plan", "--cloud", "aws", "--state-gb", "10", "--nodes", "2", *JOB, flag, value]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {message}") and result.stderr.count("\n") == 1
