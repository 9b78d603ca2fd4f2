"""Runbooks as the review reads them: each one's `last_reviewed` date from its front matter.

The commands in their shell blocks are checked by the tests (tests/runbook_checker.py), not here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = REPO / "runbooks"
FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)


class RunbookError(Exception):
    """A runbook that cannot be read as one: no front matter, front matter that is not YAML, a bad
    last_reviewed date."""


@dataclass
class Runbook:
    path: Path
    last_reviewed: date
    text: str

    @property
    def relative(self) -> str:
        return self.path.relative_to(REPO).as_posix() if self.path.is_absolute() else str(self.path)


def load_runbook(path: Path, root: Path = REPO) -> Runbook:
    text = path.read_text()
    relative = path.relative_to(root).as_posix()
    match = FRONT_MATTER.match(text)
    if not match:
        raise RunbookError(f"{relative}: no front matter (---\\nlast_reviewed: YYYY-MM-DD\\n---)")
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{relative}:{mark.line + 2}" if mark else relative  # line 1 is the first ---
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RunbookError(f"{where}: front matter is not valid YAML: {problem}") from None
    reviewed = meta.get("last_reviewed") if isinstance(meta, dict) else None
    if not isinstance(reviewed, date):
        raise RunbookError(
            f"{relative}: last_reviewed must be a date (YYYY-MM-DD), got {reviewed!r}"
        )
    return Runbook(path, reviewed, text)


def all_runbooks(root: Path = RUNBOOKS) -> list[Runbook]:
    return [load_runbook(path, root.parent) for path in sorted(root.glob("**/*.md"))]
