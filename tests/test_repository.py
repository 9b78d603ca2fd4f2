"""What git keeps stays readable: no tracked file carries a merge's conflict markers (a Python
file with them fails its import, a page or a stack file would not)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The lines that open and close a conflict; "=======" alone may be a Markdown heading's rule.
MARKER = re.compile(r"^(<{7}|>{7}) ", re.MULTILINE)


def conflict_markers(root: Path, paths: list[str]) -> list[str]:
    """`path:line` of each conflict marker line in the text files among paths."""
    found = []
    for name in paths:
        try:
            text = (root / name).read_text()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary, a submodule, or deleted and not yet committed
        for match in MARKER.finditer(text):
            found.append(f"{name}:{text.count(chr(10), 0, match.start()) + 1}")
    return found


def test_no_tracked_file_holds_conflict_markers() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.split("\0")
    assert len(tracked) > 100, "git ls-files listed almost nothing"
    assert conflict_markers(REPO, tracked) == []


def test_a_planted_conflict_is_found(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text(
        "# title\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> branch\n| a |\n"
    )
    (tmp_path / "table.md").write_text("heading\n=======\n")  # a Markdown heading's rule
    (tmp_path / "image.png").write_bytes(b"\x89PNG\xff\xfe")
    found = conflict_markers(tmp_path, ["README.md", "table.md", "image.png"])
    assert found == ["README.md:2", "README.md:6"]
