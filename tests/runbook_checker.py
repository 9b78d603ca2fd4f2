"""The runbook checker: every command in a runbook's (or a doc's) shell blocks, checked against
what the platform really offers.

A command is either run (`spotctl`, and pipelines whose input the repository can produce: the
runtime's metrics endpoint, a node description) or checked statically against
`runbooks/cli-reference.yaml` (programs, subcommands and flags), the stack's outputs, the CRDs'
resource names and the metric names the runtime and the named exporters export. Anything else is
reported as unchecked.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from datetime import date
from functools import cache

import typer
import yaml

from spotctl.cli import app
from spotctl.review.runbooks import REPO, RUNBOOKS, Runbook

REFERENCE_FILE = RUNBOOKS / "cli-reference.yaml"
# A fenced block, possibly indented in a list item: its indent, language and body.
FENCE = re.compile(r"^( *)```(\w+)\n(.*?)^\1```\n", re.MULTILINE | re.DOTALL)
PLACEHOLDER = re.compile(r"<[A-Za-z][\w .-]*>")
SEPARATORS = {"|", "||", "&&", ";", "&"}
METRIC = re.compile(r"\b(?:spotsafe|karpenter|kueue|kube)_[a-z0-9_]+\b")
EXPORT = re.compile(r"pulumi\.export\(\s*\"(\w+)\"")


@dataclass(frozen=True)
class Command:
    runbook: str  # path relative to the repository
    line: str  # the shell line as written (continuations joined)
    argv: tuple[str, ...]  # one simple command of it, placeholders replaced
    pipeline: tuple[tuple[str, ...], ...]  # the whole pipeline this command belongs to


def commands_in(text: str, relative: str) -> list[Command]:
    """The commands of every shell block of a Markdown page (a runbook or a doc)."""
    found = []
    for indent, language, body in FENCE.findall(text):
        if language in ("bash", "sh"):
            lines = "\n".join(line.removeprefix(indent) for line in body.splitlines())
            found += shell_commands(relative, lines)
    return found


def runbook_commands(runbook: Runbook) -> list[Command]:
    return commands_in(runbook.text, runbook.relative)


def shell_commands(runbook: str, body: str) -> list[Command]:
    """The simple commands of a shell block: pipelines split, `$(...)` taken out as commands of
    their own, `NAME=` assignments and redirections dropped."""
    found = []
    for line in body.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        for text in _unnest(line):
            pipeline = _pipeline(PLACEHOLDER.sub("PLACEHOLDER", text))
            for argv in pipeline:
                found.append(Command(runbook, line.strip(), argv, pipeline))
                if argv[0] == "kubectl" and "--" in argv:  # the container's own command
                    inner = argv[argv.index("--") + 1 :]
                    found.append(Command(runbook, line.strip(), inner, pipeline))
    return found


def _unnest(line: str) -> list[str]:
    """The line with each `$( ... )` replaced by a word, then the commands inside them."""
    outer, inner, depth, i = [], [], 0, 0
    while i < len(line):
        if depth == 0 and line.startswith("$(", i):
            outer.append("SUBSTITUTED")
            inner.append("")
            depth, i = 1, i + 2
            continue
        char = line[i]
        if depth:
            depth += (char == "(") - (char == ")")
            inner[-1] += char if depth else ""  # the closing parenthesis belongs to neither
        else:
            outer.append(char)
        i += 1
    return ["".join(outer), *(found for text in inner for found in _unnest(text))]


def _pipeline(text: str) -> tuple[tuple[str, ...], ...]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, current, redirect = [], [], False
    for token in lexer:
        if token in SEPARATORS:
            commands.append(current)
            current = []
        elif token in (">", ">>", "<"):
            redirect = True
        elif redirect:
            redirect = False
        elif not current and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", token):
            continue  # an assignment: its value was a substitution, checked on its own
        else:
            current.append(token)
    commands.append(current)
    return tuple(tuple(c) for c in commands if c)


@cache
def reference() -> dict:
    return yaml.safe_load(REFERENCE_FILE.read_text())


@cache
def stack_outputs() -> frozenset[str]:
    """What `pulumi stack output` can name: every pulumi.export of the platforms."""
    sources = [REPO / "__main__.py", *sorted((REPO / "components").glob("**/*.py"))]
    return frozenset(name for path in sources for name in EXPORT.findall(path.read_text()))


@cache
def known_metrics() -> frozenset[str]:
    """The runtime's metric names (as exposed, counters with `_total`) and the exporters'."""
    import prometheus_client
    import spotsafe.metrics  # noqa: F401  (registers the runtime's metrics)

    names = set()
    for family in prometheus_client.REGISTRY.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count")}
    for exporter in reference()["exporters"].values():
        for metric in exporter["metrics"]:
            names |= {metric, *(f"{metric}_{s}" for s in ("bucket", "sum", "count"))}
    return frozenset(names)


def refused(text: str) -> list[str]:
    """What in a runbook's text matches a command line known not to do what it claims."""
    return [
        f"{match.group(0)!r}: {rule['why']}"
        for rule in reference()["refused"]
        for match in re.finditer(rule["pattern"], text)
    ]


def check_command(command: Command) -> list[str]:
    """Problems with one simple command; empty when it fits the reference."""
    program, *args = command.argv
    if program == "spotctl":
        return _check_spotctl(args)
    tools = reference()
    if program not in tools or program in ("exporters", "refused"):
        return [f"{program}: not a program the runbook checker knows (runbooks/cli-reference.yaml)"]
    tool = tools[program]
    if program == "kubectl" and "--" in args:
        args = args[: args.index("--")]  # what follows is the container's command, checked apart
    positional, flags = _split(args, _every_flag(tool))
    subcommand = _subcommand(tool, positional)
    if subcommand is None:
        return [f"{program} {' '.join(positional[:2])}: not in runbooks/cli-reference.yaml"]
    allowed = {**tool["global"], **(tool["commands"][subcommand] or {})}
    problems = [
        f"{program} {subcommand}: unknown flag {flag}" for flag in flags if flag not in allowed
    ]
    operands = positional[len(subcommand.split()) :]
    if program == "kubectl" and subcommand in ("get", "describe", "delete", "patch") and operands:
        kind = operands[0].split("/")[0]
        if kind not in tool["resources"]:
            problems.append(f"kubectl {subcommand}: {kind!r} is not an object the platform runs")
    if program == "pulumi" and subcommand == "stack output":
        problems += [
            f"pulumi stack output: the stack exports no {name!r}"
            for name in operands
            if name not in stack_outputs()
        ]
    return problems


def subcommand_of(argv: tuple[str, ...]) -> str | None:
    """The subcommand (`compute regions describe`) of a command of a program the reference
    lists, flags and their values left out; None when the reference has none that fits."""
    tool = reference().get(argv[0])
    if tool is None or argv[0] in ("exporters", "refused"):
        return None
    positional, _ = _split(list(argv[1:]), _every_flag(tool))
    return _subcommand(tool, positional)


def _every_flag(tool: dict) -> dict:
    """Every flag of the tool, to tell flag values from positional words."""
    flags = dict(tool["global"])
    for command in tool["commands"].values():
        flags.update(command or {})
    return flags


def _split(args: list[str], flags: dict) -> tuple[list[str], list[str]]:
    positional, seen = [], []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and arg != "-":
            name, attached = arg.split("=", 1)[0], "=" in arg
            if re.fullmatch(r"-\d+", arg):
                name = "-N"  # head/tail's line count
            elif re.fullmatch(r"-[A-Za-z]\d+", arg) and flags.get(arg[:2]) == "value":
                name, attached = arg[:2], True  # grep -A6
            seen.append(name)
            kind = flags.get(name)
            if kind == "value" and not attached:
                i += 1
            elif kind == "values":
                while i + 1 < len(args) and not args[i + 1].startswith("-"):
                    i += 1
        else:
            positional.append(arg)
        i += 1
    return positional, seen


def _subcommand(tool: dict, positional: list[str]) -> str | None:
    for words in (4, 3, 2, 1, 0):
        candidate = " ".join(positional[:words])
        if candidate in tool["commands"]:
            return candidate
    return None


def _check_spotctl(args: list[str]) -> list[str]:
    """Whether spotctl would accept these arguments (parsed, not run)."""
    group = typer.main.get_command(app)
    name, *rest = args or [""]
    with typer.Context(group) as context:
        command = group.get_command(context, name)
    if command is None:
        return [f"spotctl: no subcommand {name!r}"]
    try:
        command.make_context(f"spotctl {name}", rest)
    except typer.Exit:
        return []
    except Exception as exc:  # the CLI library's usage errors: what spotctl would print
        return [f"spotctl {name}: {getattr(exc, 'format_message', exc.__str__)()}"]
    return []


def check_metrics(runbook: Runbook) -> list[str]:
    """Metric names a runbook mentions that nothing exports."""
    return [
        f"metric {name} is exported by neither the runtime nor a named exporter"
        for name in sorted(set(METRIC.findall(runbook.text)) - known_metrics())
        if not _is_prefix(name)
    ]


def _is_prefix(name: str) -> bool:
    """A name cut short by a regex alternation, e.g. `spotsafe_checkpoint_(age|...)`."""
    return name.endswith("_") and any(m.startswith(name) for m in known_metrics())


def promql_queries(runbook: Runbook) -> list[str]:
    """The PromQL a runbook sends to Prometheus's query API."""
    found = [
        arg.removeprefix("query=")
        for command in runbook_commands(runbook)
        for arg in command.argv
        if arg.startswith("query=")
    ]
    return list(dict.fromkeys(found))  # a query sent from inside `kubectl exec` is seen twice


def check_runbook(runbook: Runbook, today: date) -> list[str]:
    """Every problem of one runbook except its PromQL (which promtool checks)."""
    problems = [f"{runbook.relative}: {p}" for p in refused(runbook.text)]
    problems += [f"{runbook.relative}: {p}" for p in check_metrics(runbook)]
    if runbook.last_reviewed > today:
        problems.append(
            f"{runbook.relative}: last_reviewed {runbook.last_reviewed} is in the future"
        )
    for command in runbook_commands(runbook):
        problems += [f"{runbook.relative}: {command.line}\n    {p}" for p in check_command(command)]
    return problems
