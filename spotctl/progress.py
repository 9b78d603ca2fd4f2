"""Live progress on stderr for the commands that take more than a second: what runs, how far.

On a terminal, one status line that rewrites itself (rich's spinner) and is gone when the command
ends. Piped or redirected, a plain line per stage, and a count that changes often at most every
PERIOD_S seconds, so a log shows progress too without a line per resource.

Shared by the commands that preview stacks (preview, render, review), so it sits beside `cli.py`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType

import typer

PERIOD_S = 2.0


class Progress:
    """What each task of a command is doing; `update` may be called from any thread."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._tasks: dict[str, str] = {}
        self._printed = -PERIOD_S
        self._status = None
        if sys.stderr.isatty():
            from rich.console import Console

            self._status = Console(stderr=True).status(f"{command}: starting")
            self._status.start()

    def update(self, task: str, state: str, *, often: bool = False) -> None:
        """`task` is now doing `state`; `often` for a count that changes many times a second."""
        with self._lock:
            self._tasks[task] = state
            elapsed = time.monotonic() - self.started
            if self._status is not None:
                tasks = "; ".join(f"{name}: {doing}" for name, doing in self._tasks.items())
                self._status.update(f"{self.command} [{elapsed:.0f} s] {tasks}")
            elif not often or elapsed - self._printed >= PERIOD_S:
                typer.echo(f"[{elapsed:5.1f} s] {self.command} {task}: {state}", err=True)
                self._printed = elapsed

    def registrations(self, task: str) -> Callable[[int, str], None]:
        """A preview's `on_registered` for `task`: the count so far and the resource it is at."""

        def show(count: int, resource: str) -> None:
            self.update(task, f"{count} resources registered, at {resource}", often=True)

        return show

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
