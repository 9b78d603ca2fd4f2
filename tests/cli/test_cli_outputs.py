"""Where the commands write: an output path that cannot be written is one line and exit 2 before
any work, an --out that holds someone else's files is refused unless --force, and a rerun removes
only what the previous run wrote. Stack names are names, never paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotctl.cli import app
from spotctl.outputs import LEDGER, OutputDirectory, OutputError

PLAN = [
    "plan", "--cloud", "aws", "--state-gb", "1", "--interruptions-per-hour", "1",
    "--step-s", "1", "--job-hours", "10",
]  # fmt: skip


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line_refusal(result, expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert expected in result.stderr, result.stderr


def test_a_rerun_replaces_its_own_files_and_nothing_else(tmp_path):
    out = tmp_path / "out"
    first = OutputDirectory(out, "--out", force=False)
    first.clear()
    (out / "manifests").mkdir()
    old = out / "manifests" / "010-namespace-a.yaml"
    old.write_text("kind: Namespace\n")
    first.record([old])
    assert (out / LEDGER).read_text() == "manifests/010-namespace-a.yaml\n"

    again = OutputDirectory(out, "--out", force=False)  # only its own files there: no refusal
    again.clear()
    assert not old.exists() and not (out / "manifests").exists()

    (out / "manifests").mkdir()
    mine = out / "manifests" / "notes.md"
    mine.write_text("the user's own")
    with pytest.raises(OutputError, match="holds files spotctl did not write"):
        OutputDirectory(out, "--out", force=False)
    forced = OutputDirectory(out, "--out", force=True)
    forced.clear()
    new = out / "manifests" / "010-namespace-b.yaml"
    new.write_text("kind: Namespace\n")
    forced.record([new, mine])
    assert mine.read_text() == "the user's own"
    assert (out / LEDGER).read_text() == "manifests/010-namespace-b.yaml\n"


def test_a_ledger_never_reaches_outside_its_directory(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / LEDGER).write_text("../victim.txt\n/etc/hostname\n")
    OutputDirectory(out, "--out", force=False).clear()
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("command", ["render", "drill", "review"])
def test_out_holding_other_files_is_refused_before_any_work(tmp_path, command):
    folder = {"render": "manifests", "drill": "pods", "review": "."}[command]
    kept = tmp_path / folder / "mine.yaml"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text("the user's own")
    args = {"render": ["--stack", "dev"], "drill": [], "review": []}[command]
    result = invoke(command, *args, "--out", str(tmp_path))
    one_line_refusal(result, f"--out {tmp_path}: holds files spotctl did not write")
    assert "pass --force" in result.stderr
    assert kept.read_text() == "the user's own"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["render", "--stack", "dev", "--out", "/proc/spotctl"], "--out /proc/spotctl: cannot be"),
        (["review", "--out", "{file}"], "--out {file}: exists and is not a directory"),
        (["drill", "--out", "{file}"], "--out {file}: exists and is not a directory"),
        ([*PLAN, "--json", "."], "--json .: is a directory; name a file"),
        ([*PLAN, "--png", "."], "--png .: is a directory; name a file"),
        ([*PLAN, "--png", "{tmp}/chart"], "--png {tmp}/chart: name a .png file"),
        ([*PLAN, "--json", "{file}/plan.json"], "--json {file}/plan.json: cannot be written"),
        (["preview", "--stack", "dev", "--json", "."], "--json .: is a directory"),
        (
            ["render", "--stack", "dev", "--out", "{tmp}/r", "--validate", "--kubernetes-version",
             "9.99"],
            "--kubernetes-version 9.99: no schemas for it (known: 1.25",
        ),
    ],
)  # fmt: skip
def test_unwritable_outputs_are_one_line_and_exit_2(tmp_path, args, expected):
    file = tmp_path / "a-file"
    file.write_text("")
    names = {"file": file, "tmp": tmp_path}
    result = invoke(*[a.format(**names) for a in args])
    one_line_refusal(result, expected.format(**names))
    assert not (Path(".") / ".png").exists()


def test_a_stack_name_is_never_a_path(tmp_path):
    program = tmp_path / "program"
    (program / "stacks" / "Pulumi.x").mkdir(parents=True)
    (program / "Pulumi.yaml").write_text("name: p\nruntime: python\nstackConfigDir: stacks\n")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "evil.yaml").write_text("config: {}\n")
    result = invoke("preview", "--stack", "x/../../c/evil", "--program", str(program))
    assert result.exit_code == 2
    assert "'x/../../c/evil' is not a stack name" in result.stderr
