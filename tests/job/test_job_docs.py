"""docs/first-job.md runs as written: its shell blocks, in order, from a checkout of the program
(the commands the engineer runs offline), each printing what the console block after it shows,
a refusal included; the blocks left out are the ones that need the cluster."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from stack_files import REPO_ROOT

DOC = REPO_ROOT / "docs" / "first-job.md"
VENV = REPO_ROOT / ".venv"
# What the program is: a checkout needs these to preview a stack.
PROGRAM = ("Pulumi.yaml", "__main__.py", "stacks", "components")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str | None]]:
    """(bash block, the console block right after it or None), in the page's order."""
    text = DOC.read_text()
    fences = list(FENCE.finditer(text))
    found = []
    for fence, after in zip(fences, [*fences[1:], None], strict=True):
        if fence.group(1) != "bash":
            continue
        shown = None
        if after and after.group(1) == "console" and not text[fence.end() : after.start()].strip():
            shown = after.group(2)
        found.append((fence.group(2), shown))
    return found


def needs_the_cluster(block: str) -> bool:
    return all(line.startswith("kubectl ") for line in block.splitlines() if line.strip())


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in (*PROGRAM, ".venv"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    return tmp_path


def test_every_offline_block_runs_and_prints_what_it_shows(checkout: Path) -> None:
    offline = [(block, shown) for block, shown in blocks() if not needs_the_cluster(block)]
    assert sum("spotctl job" in block for block, _ in offline) >= 2
    env = dict(os.environ, PATH=f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for block, shown in offline:
        result = subprocess.run(
            ["bash", "-uo", "pipefail", "-c", block],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        refused = shown is not None and shown.startswith("error: ")
        assert result.returncode == (2 if refused else 0), f"{block}\n{result.stderr[-2000:]}"
        printed = " ".join((result.stdout + result.stderr).split())
        for line in (shown or "").splitlines():
            assert " ".join(line.split()) in printed, f"not printed: {line}\n{printed[-2000:]}"
