"""The README's figures of the drill and of the seed are the ones the code runs with: the pool,
the jobs and the hard kills of `spotctl drill`'s defaults, the planner check's tolerance, the
badput goal and the seed's manual recovery."""

from __future__ import annotations

import re

from stack_files import REPO_ROOT

from spotctl.drill.config import SEED_MANUAL_RECOVERY_S, DrillConfig
from spotctl.drill.validation import TOLERANCE
from spotctl.plan.report import BADPUT_GOAL

WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
README = " ".join((REPO_ROOT / "README.md").read_text().split())


def stated(pattern: str) -> list[str]:
    found = re.findall(pattern, README)
    assert found, f"the README no longer says {pattern!r}"
    return found


def test_the_drill_figures_are_its_defaults() -> None:
    drill = DrillConfig()
    [(spot, on_demand)] = stated(r"emulated pool \((\w+) spot nodes, (\w+) on-demand\)")
    assert (WORDS[spot], WORDS[on_demand]) == (drill.spot_nodes, drill.on_demand_nodes)
    [jobs] = stated(r"runs (\w+) real PyTorch training jobs")
    assert WORDS[jobs] == drill.jobs
    [kills] = stated(r"adds (\w+) hard kills with no notice")
    assert WORDS[kills] == drill.hard_kills
    [points] = stated(r"more than (\d+) points from the prediction")
    assert int(points) == round(100 * TOLERANCE)
    [losses] = stated(r"two-node job with (\w+) losses of one node")
    assert WORDS[losses] == drill.node_losses


def test_the_seeds_figures_are_the_ones_the_code_holds_to() -> None:
    [(idle, goal)] = stated(r"idle (\d+) % of the time against a goal of (\d+) %")
    assert int(goal) == round(100 * BADPUT_GOAL) and int(idle) > int(goal)
    [minutes] = stated(r"restarted by hand after about (\d+) minutes")
    assert int(minutes) * 60 == SEED_MANUAL_RECOVERY_S
