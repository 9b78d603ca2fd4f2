"""The drill's memory-tier part end to end: two ranks of the example trainer standing for two
nodes, a real S3-API server, real SIGKILLs on a seeded schedule; a one-node loss resumes from
the memory tier, a loss of both from the bucket, and both arms end bitwise equal to an
uninterrupted run."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import boto3
import pytest
from rich.console import Console
from spotsafe.local.servers import LOCAL_AWS_ENV

from spotctl.drill.config import DrillConfig
from spotctl.drill.memory_tier import ARMS, BOTH, run_part, schedule
from spotctl.drill.report import memory_tier_table

# One loss of one node and one of both, on short intervals: the part in well under a minute.
CONFIG = DrillConfig(seed=3, node_losses=1, memory_every_steps=4, two_node_every_steps=20)
DURABLE, MEMORY = CONFIG.two_node_every_steps, CONFIG.memory_every_steps


@pytest.fixture(scope="module")
def part(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    env = {**LOCAL_AWS_ENV, "AWS_ENDPOINT_URL": s3_endpoint}
    boto3.client("s3", endpoint_url=s3_endpoint, **_credentials()).create_bucket(Bucket="memory")
    root = tmp_path_factory.mktemp("nodes")
    return run_part(CONFIG, "s3://memory/drill", env, root, lambda line: None)


def _credentials() -> dict[str, str]:
    return {
        "region_name": LOCAL_AWS_ENV["AWS_DEFAULT_REGION"],
        "aws_access_key_id": LOCAL_AWS_ENV["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": LOCAL_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    }


def test_the_schedule_is_seeded_and_loses_both_nodes_once() -> None:
    kills = schedule(CONFIG)
    assert kills == schedule(CONFIG) != schedule(DrillConfig(seed=4, node_losses=1))
    assert sorted(k.nodes for k in kills)[-1] == BOTH
    assert [len(k.nodes) for k in kills].count(1) == CONFIG.node_losses
    steps = [DURABLE, *(k.at_step for k in kills)]
    assert all(DURABLE <= b - a < 2 * DURABLE for a, b in itertools.pairwise(steps))


def test_one_node_lost_resumes_from_memory_both_lost_from_the_bucket(part: dict) -> None:
    assert len(part["kills"]) == 2
    for kill in part["kills"]:
        before, after = kill["durable_only"], kill["memory_tier"]
        # The durable tier alone: the bucket's newest checkpoint, at most a durable interval
        # (and the steps its save was in flight) behind.
        assert before["source"] == "bucket" and before["resumed_from"] == before["durable"]
        assert 0 <= before["lost_steps"] <= 2 * DURABLE
        if kill["nodes"] == list(BOTH):
            assert after["source"] == "bucket" and after["resumed_from"] == after["durable"]
            assert after["kept"] == 0, "no node survived to keep a copy"
            assert 0 <= after["lost_steps"] <= 2 * DURABLE
        else:
            # The surviving node held both ranks' snapshot of a newer step: resumed from it.
            assert after["kept"] > after["durable"]
            assert (after["source"], after["resumed_from"]) == ("memory", after["kept"])
            assert 0 <= after["lost_steps"] <= 2 * MEMORY
    assert part["survivable_kills"] == 1 and part["survivable_kills_missed"] == 0


def test_both_arms_end_with_the_uninterrupted_weights(part: dict) -> None:
    assert part["weights_match_reference"] == dict.fromkeys(ARMS, True)
    assert len(part["reference_sha256"]) == 64


def test_lost_steps_are_reported_beside_the_planners(part: dict) -> None:
    for arm in ARMS:
        per_kill = [kill[arm]["lost_steps"] for kill in part["kills"]]
        assert part["lost_steps"][arm]["mean"] == statistics.fmean(per_kill)
    planned = part["planned_lost_steps"]
    # A uniform moment of a period loses half of it and the time its save is in flight.
    assert DURABLE / 2 < planned["durable_only"]["mean"] < 2 * DURABLE
    assert MEMORY / 2 < planned["memory_tier"]["one_node"] < planned["durable_only"]["mean"]
    assert planned["memory_tier"]["both_nodes"] == planned["durable_only"]["mean"]
    saves = part["saves"]
    assert 0 < saves["memory_save_blocked_s"] <= saves["memory_save_to_peer_s"]
    assert 0 < saves["durable_save_blocked_s"] <= saves["durable_save_s"]


def test_the_table_shows_each_kill_and_the_means(part: dict, tmp_path: Path) -> None:
    console = Console(record=True, width=160)
    console.print(memory_tier_table(part))
    text = console.export_text()
    first = part["kills"][0]["memory_tier"]
    assert f"{first['lost_steps']} (from {first['resumed_from']}, {first['source']})" in text
    planned = part["planned_lost_steps"]["durable_only"]["mean"]
    assert "mean, every kill: planned" in text and f"{planned:.1f}" in text
    assert "uninterrupted run's: durable only and memory tier" in text
