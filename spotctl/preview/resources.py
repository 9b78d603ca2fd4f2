"""What a preview of a stack returns, and running one.

`preview_program(program_dir, stack)` returns every registered resource (components
included) with the inputs exactly as the engine receives them, for renderers and policy analyzers.
Each preview runs in its own interpreter (`spotctl.preview.engine`), since Pulumi's runtime state
is process-global.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The engine's marker for a value not known until the resource exists.
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass(frozen=True)
class PreviewResource:
    urn: str
    type: str  # engine type token, e.g. "aws:s3/bucket:Bucket"
    name: str  # logical name
    parent: str | None  # parent URN; None for the root stack
    custom: bool  # False for components (and the root stack)
    inputs: dict[str, Any]  # engine (camelCase) names, secrets unwrapped, references as URNs
    # What the mock engine answered, secret inputs shown as the engine keeps them: "[secret]".
    outputs: dict[str, Any] = field(default_factory=dict)
    # Paths (keys and indexes) of the inputs the engine received as secrets.
    secrets: list[list[str | int]] = field(default_factory=list)
    dependencies: list[str] = field(default_factory=list)  # URNs
    provider: str | None = None  # "URN::id" of an explicit provider, None for the default one
    id: str | None = None  # physical id the mock engine assigned (None for components)
    # Inputs `pulumi up` leaves as they are once the resource exists (`ignore_changes`).
    ignore_changes: list[str] = field(default_factory=list)
    # Names of the hooks that may retry a failed create or update (`hooks.on_error`).
    error_hooks: list[str] = field(default_factory=list)


class PreviewError(Exception):
    """The program could not be previewed: bad config or stack name (clean message) or a crash."""

    def __init__(self, message: str, crashed: bool = False) -> None:
        super().__init__(message)
        self.crashed = crashed


@dataclass(frozen=True)
class Previewed:
    resources: list[PreviewResource]
    # (level, message) the program logged through the engine, as `pulumi preview` shows them.
    diagnostics: list[tuple[str, str]]


# Called with the count of resources registered so far and the last one's "TYPE NAME".
OnRegistered = Callable[[int, str], None]


def preview_program(
    program_dir: Path,
    stack: str,
    *,
    strict_deprecations: bool = False,
    timeout: float = 300,
    on_registered: OnRegistered | None = None,
) -> list[PreviewResource]:
    """Run the Pulumi program in `program_dir` with `stack`'s config on the mock engine.

    `strict_deprecations` fails the preview on every deprecation pulumi-aws reports (a Python
    DeprecationWarning or an engine warning). `on_registered` hears of each registration as the
    engine makes it.
    """
    return run_preview(
        program_dir,
        stack,
        strict_deprecations=strict_deprecations,
        timeout=timeout,
        on_registered=on_registered,
    ).resources


def run_preview(
    program_dir: Path,
    stack: str,
    *,
    strict_deprecations: bool = False,
    timeout: float = 300,
    on_registered: OnRegistered | None = None,
) -> Previewed:
    """`preview_program`, with what the program logged."""
    # Imported here: the engine runs in this package, and must import nothing of `components`
    # before the program does (the program's own copy is the one to preview).
    from components.config.files import ProgramInputError, load_project, program_config

    program_dir = Path(program_dir).resolve()
    try:
        project = load_project(program_dir)
        config, secret_keys = program_config(program_dir, project, stack)
    except ProgramInputError as exc:
        raise PreviewError(str(exc)) from None
    request = {
        "program_dir": str(program_dir),
        "main": str((program_dir / project.get("main", ".")).resolve()),
        "project": project["name"],
        "stack": stack,
        "config": config,
        "secret_keys": secret_keys,
    }
    with tempfile.TemporaryDirectory(prefix="spotctl-preview-") as tmp:
        request_file, out = Path(tmp) / "request.json", Path(tmp) / "preview.json"
        request_file.write_text(json.dumps(request))
        flags = ["--strict-deprecations"] if strict_deprecations else []
        reading, writing = os.pipe()
        with subprocess.Popen(
            [sys.executable, "-m", "spotctl.preview.engine", str(request_file), str(out), *flags,
             "--progress-fd", str(writing)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(writing,),
        ) as process:  # fmt: skip
            os.close(writing)
            relay = threading.Thread(target=_relay, args=(reading, on_registered), daemon=True)
            relay.start()
            try:
                _, stderr = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
            relay.join()
        if not out.is_file():
            raise PreviewError(stderr.strip() or "preview engine died", crashed=True)
        result = json.loads(out.read_text())
    if "error" in result:
        raise PreviewError(result["error"], crashed=process.returncode == 1)
    return Previewed(
        [PreviewResource(**resource) for resource in result["resources"]],
        [tuple(entry) for entry in result["diagnostics"]],
    )


def _relay(reading: int, on_registered: OnRegistered | None) -> None:
    """Reads the engine's registrations until it exits, counting them for `on_registered`."""
    with open(reading) as lines:
        for count, line in enumerate(lines, start=1):
            if on_registered is not None:
                on_registered(count, line.strip())


def waits_for(resource: PreviewResource) -> list[str]:
    """URNs of what a resource waits for before it is created: its explicit `depends_on` and the
    resources whose outputs it consumes (the engine's dependencies), its parent and its
    provider."""
    found = set(resource.dependencies)
    if resource.parent:
        found.add(resource.parent)
    if resource.provider:
        found.add(resource.provider.rsplit("::", 1)[0])
    return sorted(found)


def resource_tree(resources: list[PreviewResource]) -> str:
    """The tree `pulumi preview` prints: type, name, plan, children under their parent."""
    children: dict[str | None, list[PreviewResource]] = {}
    for resource in resources:
        children.setdefault(resource.parent, []).append(resource)
    rows: list[tuple[str, str]] = []

    def walk(parent: str | None, indent: str) -> None:
        kids = children.get(parent, [])
        for index, resource in enumerate(kids):
            last = index == len(kids) - 1
            branch = "" if parent is None else ("└─ " if last else "├─ ")
            rows.append((indent + branch + resource.type, resource.name))
            deeper = "" if parent is None else ("   " if last else "│  ")
            walk(resource.urn, indent + deeper)

    walk(None, "")
    width = max([len("Type")] + [len(t) for t, _ in rows]) + 2
    name_width = max([len("Name")] + [len(n) for _, n in rows]) + 2
    lines = [f"     {'Type':<{width}}{'Name':<{name_width}}Plan"]
    lines += [f" +   {t:<{width}}{n:<{name_width}}create" for t, n in rows]
    lines += ["", "Resources:", f"    + {len(resources)} to create"]
    unknown = [(r, path) for r in resources for path in unknown_inputs(r.inputs)]
    if unknown:
        lines += ["", "Inputs known only after deploy:"]
        lines += [f"    {r.type} {r.name}: {path} = output<unknown>" for r, path in unknown]
    return "\n".join(lines)


def unknown_inputs(value: Any, path: str = "") -> list[str]:
    """Paths of the values in `value` the engine leaves unknown until the resources exist."""
    if value == UNKNOWN:
        return [path or "(all inputs)"]
    if isinstance(value, dict):
        return [
            found
            for key, item in value.items()
            for found in unknown_inputs(item, f"{path}.{key}" if path else key)
        ]
    if isinstance(value, list):
        return [
            found for i, item in enumerate(value) for found in unknown_inputs(item, f"{path}[{i}]")
        ]
    return []
