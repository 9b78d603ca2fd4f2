"""The drill's memory-tier part: what a hard kill costs a two-node job with the durable tier
alone and with the memory tier, measured on one seeded schedule of kills and planned.

Two ranks of the example trainer stand for two nodes (spotsafe.bench.nodes), each with host
memory of its own; the job saves durably every `two_node_every_steps` steps to the drill's S3
bucket. The schedule: `node_losses` losses of one node (its rank SIGKILLed, its memory gone)
and one loss of both at once, each at a seeded step one to two durable intervals after the one
before, so it lands anywhere in a save's period; after each, both ranks restart as torchrun's
agents would. The same schedule strikes the job twice, at the same steps: the durable tier
alone (before), then with a memory save every `memory_every_steps` steps (after). A kill loses
the furthest step on record less the step resumed from. The memory tier must survive every
one-node loss that left it a newer step than the bucket's on the surviving node (resumed from
there, from memory); the loss of both falls back to the bucket. Each arm must end with the
weights of an uninterrupted run, bitwise.

The planner's prediction comes from its own model (spotctl.plan.model.lost_per_loss_s) at this
job's step and its saves' blocked and kept times, measured on the same ranks after the
uninterrupted run (spotsafe.bench.tiers), in steps.
"""

from __future__ import annotations

import json
import os
import random
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from spotsafe.bench.nodes import Loss, Nodes
from spotsafe.goodput import LOST_WORK

from spotctl.drill.config import DrillConfig
from spotctl.plan.model import lost_per_loss_s

SIZE = "small"
ARMS = ("durable_only", "memory_tier")
"""Before and after: the same job and schedule without and with the memory tier."""
POLL_S = 0.01
"""How often the drill reads the bucket's progress record while it waits to strike."""
BOTH = (0, 1)


@dataclass(frozen=True)
class Kill:
    nodes: tuple[int, ...]
    at_step: int
    """It strikes once the job's furthest step on record reaches this one."""


def schedule(config: DrillConfig) -> list[Kill]:
    """The seeded kills, one to two durable intervals apart, from one interval on: one-node
    losses (node 0 or 1) and, among them, one loss of both."""
    rng = random.Random(config.seed)
    every = config.two_node_every_steps
    lost = [(rng.randrange(2),) for _ in range(config.node_losses)]
    lost.insert(rng.randrange(len(lost) + 1), BOTH)
    steps, kills = every, []
    for nodes in lost:
        steps += rng.randrange(every, 2 * every)
        kills.append(Kill(nodes, steps))
    return kills


def job_steps(config: DrillConfig, kills: list[Kill]) -> int:
    """Steps of the job: past the last kill, room for the steps a kill strikes late by."""
    return kills[-1].at_step + 2 * config.two_node_every_steps


def run_part(
    config: DrillConfig,
    bucket_uri: str,
    env: dict[str, str],
    root: Path,
    say: Callable[[str], None],
) -> dict:
    """The uninterrupted run (its saves timed), then both arms under the schedule; the part's
    report."""
    kills = schedule(config)
    args = ["--steps", str(job_steps(config, kills)), "--size", SIZE, "--seed", str(config.seed),
            "--every-steps", str(config.two_node_every_steps)]  # fmt: skip
    with _environment(env):
        say("memory tier: an uninterrupted run of the two-node job, and its saves timed")
        reference = Nodes(f"{bucket_uri}/reference", _nodes(root / "reference"), args, None, env,
                          "spotsafe.bench.tiers")  # fmt: skip
        reference.start()
        uninterrupted = json.loads(reference.finish())
        arms = {}
        for arm, every in zip(ARMS, (None, config.memory_every_steps), strict=True):
            say(f"memory tier: {arm.replace('_', ' ')} arm, {len(kills)} hard kills")
            uri, memory = f"{bucket_uri}/{arm}", root / arm
            arms[arm] = _strike(config, kills, uri, memory, args, every, env, say)
    return report(config, kills, uninterrupted["weights_sha256"], uninterrupted["saves"], arms)


def _nodes(root: Path) -> list[Path]:
    """The two nodes' host memory."""
    return [root / "node0", root / "node1"]


def _strike(
    config: DrillConfig,
    kills: list[Kill],
    uri: str,
    memory: Path,
    args: list[str],
    memory_every: int | None,
    env: dict[str, str],
    say: Callable[[str], None],
) -> tuple[list[Loss], dict]:
    """One arm: the job under the schedule of kills, then to its end. Its losses and rank 0's
    JSON line."""
    paced = [*args, "--step-s", str(config.two_node_step_s)]
    nodes = Nodes(uri, _nodes(memory), paced, memory_every, env)
    nodes.start()
    nodes.wait(nodes.committed, poll_s=POLL_S)  # a first checkpoint to fall back to
    losses = []
    for kill in kills:
        nodes.wait(lambda k=kill: nodes.reached() >= k.at_step, poll_s=POLL_S)
        loss = nodes.lose(*kill.nodes)
        losses.append(loss)
        say(
            f"{_lost_nodes(kill.nodes):>13} at step {loss.reached}: resumed from step "
            f"{loss.resumed_from} ({loss.source}), {loss.lost_steps} steps lost"
        )
    return losses, json.loads(nodes.finish())


def _lost_nodes(nodes: tuple[int, ...]) -> str:
    return "both nodes lost" if nodes == BOTH else f"node {nodes[0]} lost"


def step_s(result: dict) -> float:
    """Seconds a step of the job took in an arm's last attempt (its goodput ledger: the steps
    it trained, new or repeated)."""
    ledger = result["goodput"]
    steps = result["final_step"] - (result["resumed_from"] or 0)
    return (ledger["goodput_s"] + ledger["badput_s"][LOST_WORK]) / steps


def planned(config: DrillConfig, saves: dict, step: float, one_node_share: float) -> dict:
    """The planner's lost steps per kill: a loss at a uniform moment of a tier's period loses
    lost_per_loss_s of it. The durable tier's covers every kill before and the loss of both
    after; the memory tier's the one-node losses, weighed by their share as two_tiers does."""
    durable = lost_per_loss_s(
        config.two_node_every_steps * step, saves["durable_save_blocked_s"], saves["durable_save_s"]
    )
    memory = lost_per_loss_s(
        config.memory_every_steps * step,
        saves["memory_save_blocked_s"],
        saves["memory_save_to_peer_s"],
    )
    after = one_node_share * memory + (1 - one_node_share) * durable
    return {
        "durable_only": {"mean": durable / step, "one_node": durable / step,
                         "both_nodes": durable / step},
        "memory_tier": {"mean": after / step, "one_node": memory / step,
                        "both_nodes": durable / step},
    }  # fmt: skip


def _lost(losses: list[Loss]) -> dict:
    one_node = [loss.lost_steps for loss in losses if loss.nodes != BOTH]
    both = [loss.lost_steps for loss in losses if loss.nodes == BOTH]
    return {
        "mean": statistics.fmean(loss.lost_steps for loss in losses),
        "one_node": statistics.fmean(one_node),
        "both_nodes": statistics.fmean(both),
    }


def report(
    config: DrillConfig,
    kills: list[Kill],
    reference_sha256: str,
    saves: dict,
    arms: dict[str, tuple[list[Loss], dict]],
) -> dict:
    step = statistics.fmean(step_s(result) for _, result in arms.values())
    tiered = arms["memory_tier"][0]
    survivable = [loss for loss in tiered if loss.survivable]
    return {
        "job": {
            "steps": job_steps(config, kills),
            "durable_every_steps": config.two_node_every_steps,
            "memory_every_steps": config.memory_every_steps,
            "step_s": step,
            "size": SIZE,
        },
        "saves": saves,
        "kills": [
            {
                "nodes": list(kill.nodes),
                "at_step": kill.at_step,
                **{arm: _loss_json(arms[arm][0][i]) for arm in ARMS},
            }
            for i, kill in enumerate(kills)
        ],
        "lost_steps": {arm: _lost(arms[arm][0]) for arm in ARMS},
        "planned_lost_steps": planned(
            config, saves, step, sum(k.nodes != BOTH for k in kills) / len(kills)
        ),
        "reference_sha256": reference_sha256,
        "weights_match_reference": {
            arm: arms[arm][1]["weights_sha256"] == reference_sha256 for arm in ARMS
        },
        "survivable_kills": len(survivable),
        # One-node losses that left the memory tier a step newer than the bucket's on the
        # surviving node, yet did not resume from that step in memory.
        "survivable_kills_missed": sum(
            (loss.source, loss.resumed_from) != ("memory", loss.kept) for loss in survivable
        ),
    }


def _loss_json(loss: Loss) -> dict:
    return {**asdict(loss), "nodes": list(loss.nodes), "lost_steps": loss.lost_steps}


@contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """The drill reads the bucket itself (progress, commits) through the same local server as
    its ranks: their environment, for the part's duration."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
