"""Loading a stack config: the decoded document (`components.config.document`), then the schema
(`components.config.stack`), then, on a valid document, whether its capacity can run its jobs
(`components.config.capacity`). Any problem raises `ConfigError`, whose message names every failing
field path and, for an enumeration, its allowed values."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, get_origin

from pydantic import ValidationError

from components.config.capacity import capacity_problems
from components.config.document import SECRET, decode_values, document_problems
from components.config.files import ProgramInputError, load_project, program_config
from components.config.gcp import environment_problem
from components.config.schema import misplaced_secrets, secret_fields
from components.config.stack import StackConfig

# Labels pydantic adds to error locations, e.g. "function-after[_check(), Pool]".
PYDANTIC_LABEL = re.compile(r"^(function-[a-z]+|[a-z]+-union|tagged-union)\[")


class ConfigError(ValueError):
    """A stack config that does not validate. `problems` holds (field path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]], namespace: str = "") -> None:
        self.problems = problems
        prefix = f"{namespace}:" if namespace else ""
        lines = [f"  {prefix}{path}: {message}" for path, message in problems]
        super().__init__("invalid stack config:\n" + "\n".join(lines))


# What an encrypted value in a field that is no credential is told.
MISPLACED_SECRET = (
    "stored encrypted (`secure:`), but the platform writes this field in plain text (names, "
    f"tags, settings); only {', '.join(secret_fields(StackConfig))} may be secret: set it "
    "without --secret"
)

# Top-level fields whose value is text: Pulumi's string form of `"true"` or `"123"` is the value.
STRING_FIELDS = tuple(
    name
    for name, field in StackConfig.model_fields.items()
    if field.annotation is str or get_origin(field.annotation) is Literal
)


def load_values(
    values: Mapping[str, str], namespace: str, secret_keys: Iterable[str] = ()
) -> StackConfig:
    """`load_config` on the stack's config as Pulumi hands it to the program: every key
    namespaced, every value a string (structured ones JSON-encoded), `secret_keys` the keys that
    hold an encrypted value. The CLI marks a whole key, so a key of the project's that holds no
    credential field is refused here; placeholders name the exact field offline."""
    holders = {path.split(".")[0] for path in secret_fields(StackConfig)}
    refused = sorted(
        key
        for key in secret_keys
        if key.startswith(f"{namespace}:") and key.partition(":")[2] not in holders
    )
    if refused:
        raise ConfigError([(key, MISPLACED_SECRET) for key in refused])
    return load_config(_decoded(values, namespace), namespace)


def stack_document(program_dir: Path, stack: str) -> dict[str, Any]:
    """A stack's config as the program sees it (Pulumi.yaml's defaults under the stack file's
    values, `components.config.files`), as the document `load_config` validates: field -> value.
    Raises ProgramInputError for a file that cannot be read, ConfigError for a key that cannot."""
    project = load_project(program_dir)
    values, _ = program_config(program_dir, project, stack)
    return _decoded(values, project["name"])


def _decoded(values: Mapping[str, str], namespace: str) -> dict[str, Any]:
    """The config values as a document (field -> value); a key that cannot be read is a
    ConfigError naming it."""
    raw, problems = decode_values(values, namespace, STRING_FIELDS)
    if problems:
        raise ConfigError(problems)
    return raw


def load_config(raw: dict[str, Any], namespace: str = "") -> StackConfig:
    """Validate the raw config map (field -> decoded value): the document, the schema, then the
    capacity checks; raise ConfigError on any problem."""
    problems = document_problems(raw)
    if problems:
        raise ConfigError([(_path(loc), message) for loc, message in problems], namespace)
    environment = raw.get("environment") if isinstance(raw, dict) else None
    try:
        config = StackConfig.model_validate(raw, context={"environment": environment})
    except ValidationError as exc:
        raise ConfigError(
            [(_path(err["loc"]), _message(err)) for err in exc.errors()], namespace
        ) from None
    misplaced = [(path, MISPLACED_SECRET) for path in misplaced_secrets(config)]
    if misplaced:
        raise ConfigError(misplaced, namespace)
    problem = config.cloud == "gcp" and environment_problem(config.environment)
    problems = [("environment", problem)] if problem else capacity_problems(config)
    if problems:
        raise ConfigError(problems, namespace)
    return config


def _path(loc: tuple[str | int, ...]) -> str:
    """pydantic's error location as the user wrote it: `teams[0].name`, `cost_tags['a b']`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]" or PYDANTIC_LABEL.match(part):
            continue  # pydantic's own labels, not part of the user's document
        elif re.fullmatch(r"[A-Za-z0-9_-]+", part):
            path += f".{part}" if path else part
        else:
            path += f"[{part!r}]"
    return path or "(root)"


def _message(err: dict[str, Any]) -> str:
    message = err["msg"].removeprefix("Value error, ")
    if err.get("input") == SECRET:
        return MISPLACED_SECRET
    if err["type"] == "extra_forbidden":
        return "unknown field (check the spelling against the schema)"
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "string_pattern_mismatch":
        return f"{err['input']!r} does not match {err['ctx']['pattern']}"
    return message


def read_stack(program_dir: Path, stack: str, option: str) -> StackConfig:
    """A stack's validated config for a command that names it with `option`; a stack that
    cannot be read or is invalid is one ProgramInputError line naming the option."""
    try:
        return load_config(stack_document(program_dir, stack))
    except ProgramInputError as exc:
        raise ProgramInputError(f"{option} {stack}: {exc}") from None
    except ConfigError as exc:
        path, message = exc.problems[0]
        more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
        raise ProgramInputError(f"{option} {stack}: {path}: {message}{more}") from None
