"""Every shell block that runs `spotctl plan` in the docs, the README and the runbooks runs as
written, and the output shown after it is what it prints."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from stack_files import REPO_ROOT

VENV = REPO_ROOT / ".venv"
# A fenced block, possibly indented in a list item: its indent, language and body.
FENCE = re.compile(r"^( *)```(\w+)\n(.*?)^\1```\n", re.MULTILINE | re.DOTALL)
MUST_HAVE = {
    "README.md",
    "docs/planning.md",
    "runbooks/aws/GpuIdleHigh.md",
    "runbooks/training/TrainingStepsLost.md",
    "runbooks/training/SpotInterruptionRateHigh.md",
}


def plan_blocks() -> list:
    """(file, bash block, the console block right after it or None), in file order."""
    found = []
    for path in sorted(REPO_ROOT.glob("**/*.md")):
        relative = path.relative_to(REPO_ROOT).as_posix()
        if relative.startswith(".venv/"):
            continue
        text = path.read_text()
        fences = list(FENCE.finditer(text))
        for i, fence in enumerate(fences):
            indent, language, body = fence.groups()
            body = _dedent(body, indent)
            if language != "bash" or "spotctl plan" not in body:
                continue
            after = fences[i + 1] if i + 1 < len(fences) else None
            shown = None
            if (
                after
                and after.group(2) == "console"
                and not text[fence.end() : after.start()].strip()
            ):
                shown = _dedent(after.group(3), after.group(1))
            found.append((relative, body, shown))
    return found


def _dedent(body: str, indent: str) -> str:
    return "\n".join(line.removeprefix(indent) for line in body.splitlines())


BLOCKS = plan_blocks()


def test_the_planner_is_shown_where_on_call_and_users_look() -> None:
    assert {relative for relative, _, _ in BLOCKS} >= MUST_HAVE


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory that looks like the repository root to the commands: `.venv/bin/...`
    resolves, `--stack NAME` finds the project's stacks, and what they write stays out of the
    checkout."""
    path = tmp_path_factory.mktemp("docs")
    for name in (".venv", "Pulumi.yaml", "stacks"):
        (path / name).symlink_to(REPO_ROOT / name)
    return path


@pytest.mark.parametrize(
    ("relative", "block", "shown"),
    BLOCKS,
    ids=[f"{relative}:{n}" for n, (relative, _, _) in enumerate(BLOCKS)],
)
def test_block_runs_as_written(relative: str, block: str, shown: str | None, workdir: Path) -> None:
    env = dict(os.environ, PATH=f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}")
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{relative}:\n{block}\n{result.stderr[-2000:]}"
    printed = " ".join(result.stdout.split())
    for line in (shown or "").splitlines():
        if line.strip():
            assert " ".join(line.split()) in printed, f"{relative}: not printed: {line}"
