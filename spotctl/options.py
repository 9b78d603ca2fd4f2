"""Options shared by the commands that read a stack: --stack (preview, render), --program
(preview, render, drill --cloud-run, plan --stack), --policy-pack-config (preview, review); and
`choices`, the type of an option that takes one of a few values.

Shared by several commands, so it sits beside `cli.py` rather than in one command's package.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

StackOption = Annotated[str, typer.Option("--stack", help="Stack name: stacks/Pulumi.<NAME>.yaml.")]
ProgramOption = Annotated[
    Path | None,
    typer.Option(
        "--program",
        help="Directory with Pulumi.yaml (default: the project the current directory is in).",
    ),
]
PolicyPackConfigOption = Annotated[
    Path | None,
    typer.Option("--policy-pack-config", help="JSON policy config, as for `pulumi preview`."),
]


def choices(name: str, values: Iterable[str]) -> type[StrEnum]:
    """An enumeration of `values`: `--help` lists them, and the parser refuses any other value
    before the command runs. Its members are the strings themselves."""
    return StrEnum(name, [(value, value) for value in values])
