"""docs/architecture.md stays true: no import circle, no arrow between rooms against its table."""

from __future__ import annotations

import textwrap
from pathlib import Path

from import_rules import findings

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"


def test_the_source_keeps_the_rooms_and_arrows_of_the_doc() -> None:
    problems = findings(REPO, DOC)
    assert not problems, "\n".join(problems.values())


def plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def test_the_checker_catches_a_planted_circle_and_a_forbidden_arrow(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "docs/architecture.md": """\
                | room | where | what | may import |
                |---|---|---|---|
                | low | `src/app/low/` | the base | nothing |
                | high | `src/app/high/` | on the base | low |
                | app | `src/app/` | the rest | high, low |
                | gone | `src/app/gone.py` | a module moved away | nothing |
                """,
            "src/app/__init__.py": "",
            "src/app/low/__init__.py": "",
            # A circle closed by a lazy, relative import.
            "src/app/low/a.py": """\
                from app.low.b import VALUE


                def later():
                    from . import b

                    return b
                """,
            "src/app/low/b.py": """\
                def value():
                    from ..low import a

                    return a


                VALUE = 1
                """,
            # A forbidden arrow that exists for the type checker only.
            "src/app/low/c.py": """\
                from typing import TYPE_CHECKING

                if TYPE_CHECKING:
                    from app.high.h import Thing
                """,
            "src/app/high/__init__.py": "",
            "src/app/high/h.py": "Thing = int\n",
            # A circle both of its modules justify is allowed.
            "src/app/high/d.py": '''\
                """D.

                Import circle: app.high.e hands d its callbacks, d runs them.
                """

                from app.high import e
                ''',
            "src/app/high/e.py": '''\
                """E.

                Import circle: with app.high.d, which calls back here.
                """

                from app.high import d
                ''',
        },
    )
    found = findings(tmp_path, tmp_path / "docs" / "architecture.md")
    assert found.keys() == {
        "circle: app.low.a app.low.b",
        "arrow: app.low.c -> app.high.h",
        "no module: src/app/gone.py",
    }
    assert found["circle: app.low.a app.low.b"].splitlines() == [
        "import circle app.low.a <-> app.low.b:",
        "  src/app/low/a.py:1: from app.low.b import VALUE",
        "  src/app/low/a.py:5: from . import b",
        "  src/app/low/b.py:2: from ..low import a",
    ]
    assert found["arrow: app.low.c -> app.high.h"] == (
        "src/app/low/c.py:4: room low imports room high, which architecture.md does not allow: "
        "from app.high.h import Thing"
    )


def test_a_circle_justified_by_only_one_of_its_modules_is_still_found(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "docs/architecture.md": "| Room | Where | What | May import |\n|-|-|-|-|\n"
            "| p | `p` | all | |",
            "p/__init__.py": "",
            "p/x.py": '"""X.\n\nImport circle: p.y calls back.\n"""\n\nfrom p import y\n',
            "p/y.py": '"""Y."""\n\nfrom p import x\n',
        },
    )
    assert list(findings(tmp_path, tmp_path / "docs" / "architecture.md")) == ["circle: p.x p.y"]
