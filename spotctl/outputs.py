"""Where the commands write. Every output path is checked before the work starts, so a path that
cannot be written is one line and exit 2, not a traceback after minutes of work. And a command
never deletes what it did not write: an output directory that holds files of someone else is
refused unless `--force` (then the command writes beside them), and a rerun removes only the
files its previous run listed in the directory's ledger.

Shared by every command that writes (preview, render, drill, plan, review), so it sits beside
`cli.py` rather than in one command's package.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

# The files a command wrote into an output directory, one relative path a line.
LEDGER = ".spotctl-files"
# --force for a command that writes into an --out directory (OutputDirectory's `force`).
ForceOption = Annotated[
    bool, typer.Option("--force", help="Write into an --out that holds other files too.")
]


class OutputError(Exception):
    """An output path that cannot be used; the message names the option and the path."""


def fail(exc: OutputError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


def _writable(folder: Path, option: str, shown: Path) -> None:
    """Create the folder if need be and prove a file can be written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise OutputError(f"{option} {shown}: cannot be written ({exc.strerror or exc})") from None


def output_file(path: Path, option: str) -> Path:
    """A file the command will write: not a directory, in a folder that can take it."""
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a directory; name a file")
    _writable(path.parent, option, path)
    return path


class OutputDirectory:
    """An output directory claimed before the work: `clear` removes what the previous run wrote,
    `record` lists what this run wrote."""

    def __init__(self, path: Path, option: str, force: bool) -> None:
        if path.exists() and not path.is_dir():
            raise OutputError(f"{option} {path}: exists and is not a directory")
        _writable(path, option, path)
        self.path = path
        self.ours = set(self._listed())
        self.foreign = {f for f in self._files() if f not in self.ours}
        if self.foreign and not force:
            examples = ", ".join(sorted(self.foreign)[:3])
            raise OutputError(
                f"{option} {path}: holds files spotctl did not write ({examples}"
                f"{', ...' if len(self.foreign) > 3 else ''}); choose another directory, or pass "
                "--force to write beside them (nothing of theirs is deleted)"
            )
        if self.foreign:
            typer.echo(
                f"{path}: writing beside {len(self.foreign)} files spotctl did not write; "
                "those of the same name are replaced",
                err=True,
            )

    def _files(self) -> list[str]:
        return [
            p.relative_to(self.path).as_posix()
            for p in self.path.rglob("*")
            if p.is_file() and p.name != LEDGER
        ]

    def _listed(self) -> list[str]:
        ledger = self.path / LEDGER
        names = ledger.read_text().splitlines() if ledger.is_file() else []
        return [n for n in names if n and ".." not in Path(n).parts and not Path(n).is_absolute()]

    def clear(self) -> None:
        """Remove the files the previous run wrote (and the folders they leave empty)."""
        for name in sorted(self.ours, reverse=True):
            path = self.path / name
            path.unlink(missing_ok=True)
            for folder in path.parents:
                if folder == self.path or not folder.is_dir() or any(folder.iterdir()):
                    break
                folder.rmdir()
        self.ours = set()

    def record(self, files: Iterable[Path]) -> None:
        """List this run's files, so the next run may replace them and nothing else."""
        names = {Path(f).resolve().relative_to(self.path.resolve()).as_posix() for f in files}
        self.ours = names - self.foreign
        (self.path / LEDGER).write_text("".join(f"{n}\n" for n in sorted(self.ours)))

    def files_under(self, *folders: str) -> list[Path]:
        """The files now under these folders of the directory, whoever wrote them."""
        return [p for folder in folders for p in (self.path / folder).rglob("*") if p.is_file()]
