"""The CLI answers at once: `--help`, a usage error, `spotctl plan` and a refused `spotctl job`
load none of the heavy packages (torch, Pulumi, matplotlib, boto3) the other commands need; a bad
input of `preview` is refused before the engine starts; the preview says what it is doing while
it works; `-h` and `--version` work; options that take one of a few values list them in `--help`
and refuse others in one line; a rate far outside any measured one is warned about in the unit
it was read in."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from stack_files import REPO_ROOT
from typer.testing import CliRunner

from spotctl.cli import app

PROGRAMS = Path(__file__).parents[1] / "policies" / "programs"
HEAVY = ("torch", "pulumi", "pulumi_aws", "matplotlib", "boto3", "numpy", "cel")
PLAN = ["plan", "--cloud", "aws", "--state-gb", "1", "--step-s", "1", "--job-hours", "10"]
JOB = ["job", "--stack", "dev", "--name", "run", "--state-gib", "1", "--step-s", "1"]

# Runs the CLI in a fresh interpreter and prints which heavy packages it loaded.
LOADED = """
import json, sys
from spotctl.cli import app
try:
    app(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy} if m in sys.modules)), file=sys.stderr)
"""


def loaded_by(*args: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", LOADED.format(heavy=HEAVY), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return json.loads(result.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["plan", "-h"],
        ["preview", "--stack", "no-such-stack"],
        ["plan", "--cloud", "azure", "--step-s", "1", "--job-hours", "1"],
        [*PLAN, "--interruption-band", "<5%"],
        [*PLAN, "--stack", "prod", "--class", "h100-80gb", "--program", str(REPO_ROOT)],
        ["job", "-h"],
        [*JOB, "--image", "trainer:latest", "--", "python", "train.py"],
        ["status", "--prometheus", "http://127.0.0.1:1", "--run", "llama"],
    ],
    ids=[
        "help",
        "plan-help",
        "no-such-stack",
        "usage-error",
        "plan",
        "plan-stack-class",
        "job-help",
        "job-refusal",
        "status",
    ],
)
def test_quick_answers_load_no_heavy_package(args: list[str]) -> None:
    assert loaded_by(*args) == []


def test_h_and_version() -> None:
    short, long = CliRunner().invoke(app, ["-h"]), CliRunner().invoke(app, ["--help"])
    assert short.exit_code == 0 and short.output == long.output
    assert "preview" in short.output and "plan" in short.output
    shown = CliRunner().invoke(app, ["--version"])
    assert shown.exit_code == 0
    assert shown.output == f"spotctl {version('spot-training-blueprint')}\n"


@pytest.mark.parametrize(
    ("command", "choices"),
    [
        ("plan", ["aws", "gcp", "<5%", "5-10%", "10-15%", "15-20%", ">20%", "pull", "stream"]),
        ("drill", ["small", "medium", "any", "gcp"]),
    ],
)
def test_help_lists_the_choices(command: str, choices: list[str]) -> None:
    shown = CliRunner().invoke(app, [command, "-h"], terminal_width=200)
    assert shown.exit_code == 0
    for choice in choices:
        assert f"|{choice}" in shown.output or f"{choice}|" in shown.output, choice


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "--cloud", "azure"], "Invalid value for '--cloud': 'azure' is not one of"),
        (["plan", "--bogus"], "No such option: --bogus"),
        (["prevew"], "No such command 'prevew'"),
        (["drill", "--size", "large"], "'large' is not one of 'small', 'medium'"),
    ],
)
def test_a_usage_error_is_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert message in result.stderr and result.stdout == ""


def test_an_implausible_rate_is_warned_about_in_its_unit() -> None:
    meant_as_percent = CliRunner().invoke(app, [*PLAN, "--interruptions-per-hour", "5"])
    assert meant_as_percent.exit_code == 0
    [warning] = meant_as_percent.stderr.splitlines()
    assert warning.startswith(
        "warning: --interruptions-per-hour 5 reads as 5 spot interruptions per node-hour, one "
        "every 12 minutes on each node"
    )
    assert "--interruption-band" in warning
    plausible = CliRunner().invoke(app, [*PLAN, "--interruptions-per-hour", "0.002"])
    assert plausible.exit_code == 0 and plausible.stderr == ""


def spotctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).with_name("spotctl")), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy-pack", "policy"], "error: --policy-pack policy: no PulumiPolicy.yaml"),
        (["--policy-pack-config", "missing.json"], "error: --policy-pack-config missing.json: "),
        (["--program", "nowhere"], "error: nowhere: no Pulumi.yaml"),
    ],
)
def test_a_bad_preview_input_is_refused_before_the_engine_starts(
    args: list[str], message: str
) -> None:
    result = spotctl("preview", "--stack", "prod", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1, result.stderr


def test_the_preview_says_what_it_does_while_it_works() -> None:
    program = PROGRAMS / "untainted-spot-pool"
    result = spotctl("preview", "--stack", "test", "--program", str(program))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    progress = re.compile(r"\[ *\d+\.\d s\] preview test: ")
    assert lines and all(progress.match(line) for line in lines), lines
    assert lines[0].endswith("starting the engine (Pulumi and the providers load first)")
    created = re.search(r"\+ (\d+) to create", result.stdout).group(1)
    assert lines[-1].endswith(f"previewed, {created} resources")
