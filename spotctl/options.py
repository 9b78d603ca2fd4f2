"""Options shared by the commands that read a stack: --stack (preview, render), --program
(preview, render, drill --cloud-run, plan --stack), --policy-pack-config (preview, review).

Shared by several commands, so it sits beside `cli.py` rather than in one command's package.
"""

from __future__ import annotations

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
