"""The program's project file and stack files, read as the Pulumi CLI reads them: the one reader
of stack files, for the preview, the policy check, the review and the tests.

What the CLI does (Pulumi project file reference, pulumi.com/docs/reference/pulumi-yaml):
`stackConfigDir` in Pulumi.yaml is where `Pulumi.<stack>.yaml` lives, relative to Pulumi.yaml;
Pulumi.yaml's own `config:` (Pulumi 3.44 and later) gives project-wide values, each written
plainly or as a mapping with a `value` (any namespace) or a `default` (the project's own keys),
which a stack's `config:` overrides. The YAML is strict: a key written twice is an error.
Anything unreadable is one `ProgramInputError` line naming the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from components.config.document import SECRET


class ProgramInputError(Exception):
    """The program directory or its stack files cannot be read as given."""


PROJECT_FILES = ("Pulumi.yaml", "Pulumi.yml")


def find_program(start: Path) -> Path:
    """The Pulumi project `start` lies in: the nearest folder upward with a Pulumi.yaml, as the
    Pulumi CLI finds it."""
    for folder in (start, *start.parents):
        if project_file(folder):
            return folder
    raise ProgramInputError(
        f"no Pulumi.yaml in {start} or any folder above it: run from a Pulumi project or pass "
        "--program"
    )


class UniqueKeyLoader(yaml.SafeLoader):
    """YAML as the Pulumi CLI reads it: a key written twice in one mapping is an error, not the
    last value silently winning."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool):
                continue  # the base class refuses what cannot be a key
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    problem=f"key {key!r} appears twice in one mapping",
                    problem_mark=key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """A YAML file's document; anything unreadable is a one-line ProgramInputError naming the
    place."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProgramInputError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ProgramInputError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProgramInputError(f"{where}: not valid YAML: {problem}") from None
    except RecursionError:
        raise ProgramInputError(f"{path}: not a config: nested too deeply") from None
    except ValueError as exc:  # an integer literal longer than Python converts
        raise ProgramInputError(f"{path}: not a config: {str(exc).split(';')[0]}") from None


def project_file(program_dir: Path) -> Path | None:
    """The program's Pulumi.yaml (or Pulumi.yml); None where it has none."""
    return next((program_dir / n for n in PROJECT_FILES if (program_dir / n).is_file()), None)


def load_project(program_dir: Path) -> dict[str, Any]:
    """Pulumi.yaml of the program, with the keys the CLI defaults filled in."""
    path = project_file(program_dir)
    if path is None:
        raise ProgramInputError(f"{program_dir}: no Pulumi.yaml (not a Pulumi program directory)")
    project = read_yaml(path) or {}
    if not isinstance(project, dict) or not project.get("name"):
        raise ProgramInputError(f"{path}: a Pulumi project file needs a 'name'")
    if not isinstance(project.get("stackConfigDir", ""), str):
        raise ProgramInputError(f"{path}: 'stackConfigDir' must be a folder path (a string)")
    return project


# What Pulumi allows in a stack name: letters, digits, '-', '_' and '.' (never a path).
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def stack_config_dir(program_dir: Path, project: dict[str, Any]) -> Path:
    """Where the stack files are: `stackConfigDir`, relative to Pulumi.yaml, else beside it."""
    return program_dir / project.get("stackConfigDir", ".")


def stack_names(program_dir: Path, project: dict[str, Any]) -> list[str]:
    """The stacks that have a stack file, by name."""
    files = stack_config_dir(program_dir, project).glob("Pulumi.*.y*ml")
    return sorted({path.name.removeprefix("Pulumi.").rsplit(".", 1)[0] for path in files})


def stack_file(program_dir: Path, project: dict[str, Any], stack: str) -> Path:
    if not STACK_NAME.fullmatch(stack) or stack.strip(".") == "":
        raise ProgramInputError(
            f"{stack!r} is not a stack name (letters, digits, '-', '_' and '.')"
        )
    config_dir = stack_config_dir(program_dir, project)
    for suffix in ("yaml", "yml"):
        path = config_dir / f"Pulumi.{stack}.{suffix}"
        if path.is_file():
            return path
    known = stack_names(program_dir, project)
    raise ProgramInputError(
        f"no stack {stack!r} in {config_dir} (stacks there: {', '.join(known) or 'none'})"
    )


def stack_config(path: Path, project_name: str) -> tuple[dict[str, str], list[str]]:
    """The stack's `config:` as the CLI hands it to a program: namespaced keys, string values.

    Structured values travel JSON-encoded; scalars as their string form. `secure:` values, at the
    top or nested (`pulumi config set --secret --path`), cannot be decrypted offline: each becomes
    the placeholder SECRET, and its key is marked secret, as the CLI marks a key that holds one.
    """
    document = read_yaml(path) or {}
    if not isinstance(document, dict):
        raise ProgramInputError(f"{path}: a stack file must be a mapping with a 'config' key")
    if "environment" in document:
        raise ProgramInputError(_environment_refusal(path, document["environment"]))
    config: dict[str, str] = {}
    secret_keys: list[str] = []
    for full_key, value in _namespaced(path, document.get("config"), project_name).items():
        value, secret = _opaque_secrets(value)
        config[full_key] = _config_string(value)
        if secret:
            secret_keys.append(full_key)
    return config, secret_keys


def _opaque_secrets(value: Any) -> tuple[Any, bool]:
    """The value with each `secure:` value in it replaced by SECRET, and whether it held one."""
    if isinstance(value, dict) and set(value) == {"secure"}:
        return SECRET, True
    if isinstance(value, dict):
        pairs = {key: _opaque_secrets(item) for key, item in value.items()}
        return {key: item for key, (item, _) in pairs.items()}, any(
            secret for _, secret in pairs.values()
        )
    if isinstance(value, list):
        pairs = [_opaque_secrets(item) for item in value]
        return [item for item, _ in pairs], any(secret for _, secret in pairs)
    return value, False


def _environment_refusal(path: Path, imports: Any) -> str:
    """Why a stack that imports Pulumi ESC environments cannot be read offline, and what to do.

    Only the Pulumi CLI, signed in to Pulumi Cloud, opens an environment; reading its values from
    a file instead would put its secrets on disk in plain text and preview values that `pulumi up`
    may no longer see.
    """
    names = ", ".join(map(str, imports)) if isinstance(imports, list) else str(imports)
    return (
        f"{path}: imports Pulumi ESC environment(s) {names}, which only the Pulumi CLI opens "
        "(`pulumi preview`); to preview offline, set the keys the stack needs in its own config "
        "instead (`pulumi config set`, with `--secret` for secrets)"
    )


def program_config(
    program_dir: Path, project: dict[str, Any], stack: str
) -> tuple[dict[str, str], list[str]]:
    """The config a program sees: Pulumi.yaml's `config:` defaults, overridden by the stack's."""
    declarations = _namespaced(project_file(program_dir), project.get("config"), project["name"])
    config = {}
    for full_key, declared in declarations.items():
        if not isinstance(declared, dict):
            config[full_key] = _config_string(declared)
        elif "value" in declared or "default" in declared:
            config[full_key] = _config_string(declared.get("value", declared.get("default")))
    values, secret_keys = stack_config(stack_file(program_dir, project, stack), project["name"])
    return {**config, **values}, secret_keys


def _namespaced(path: Path, section: Any, project_name: str) -> dict[str, Any]:
    """A file's `config:` section by full key (a key without a namespace is the project's);
    a section that is not a mapping with string keys is a ProgramInputError naming the file."""
    section = section or {}
    if not isinstance(section, dict):
        raise ProgramInputError(f"{path}: 'config' must be a mapping")
    for key in section:
        if not isinstance(key, str):
            raise ProgramInputError(f"{path}: config key {key!r} is not a string; quote it")
    return {key if ":" in key else f"{project_name}:{key}": value for key, value in section.items()}


def _config_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)
