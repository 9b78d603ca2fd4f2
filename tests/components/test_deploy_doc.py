"""docs/deploy.md and docs/deploy-gcp.md, checked: their offline commands run as printed, and what
the others name (config paths, stack outputs, shell syntax) exists, so the pages cannot drift
from the program."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel
from stack_files import REPO_ROOT, stack_values

from components.config import ConfigError, StackConfig, load_config

DOCS = [REPO_ROOT / "docs" / "deploy.md", REPO_ROOT / "docs" / "deploy-gcp.md"]
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)
PLACEHOLDER = re.compile(r"<[^<>\n]+>")


def blocks(doc: Path, language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(doc.read_text()) if lang == language]


def commands(doc: Path) -> list[str]:
    """Every command of the bash blocks, continuation lines joined, comments dropped."""
    text = "\n".join(blocks(doc, "bash")).replace("\\\n", " ")
    lines = (line.split("  #")[0].strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _types(annotation) -> list:
    """The model, list or scalar types an annotation stands for (Optional, Annotated unwrapped)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _types(typing.get_args(annotation)[0])
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return [t for arg in typing.get_args(annotation) for t in _types(arg)]
    return [annotation]


def resolves(path: str) -> bool:
    """Whether a config path (`teams[0].engineers`, `aws.pools.<tier>.disk_size_gib`) names a
    field of the stack config schema; `<...>` stands for any field, `[]` for any item, any key
    of a map for its entry (`teams[0].quotas.a10g-24gb`)."""
    current = [StackConfig]
    for token in re.findall(r"\[\d*\]|[^.\[\]]+", path):
        found = []
        for annotation in current:
            for kind in _types(annotation):
                if token.startswith("["):
                    if typing.get_origin(kind) is list:
                        found.append(typing.get_args(kind)[0])
                elif typing.get_origin(kind) is dict:
                    found.append(typing.get_args(kind)[1])
                elif isinstance(kind, type) and issubclass(kind, BaseModel):
                    fields = kind.model_fields
                    names = list(fields) if token.startswith("<") else [token] * (token in fields)
                    found += [fields[name].annotation for name in names]
        if not found:
            return False
        current = found
    return True


def test_the_path_check_rejects_a_misspelt_path():
    assert resolves("aws.pools.<tier>.disk_size_gib") and resolves("teams[0].engineers[0]")
    assert resolves("teams[0].quotas.a10g-24gb.spot_gpus")
    assert not resolves("aws.pool.spot.disk_size_gib")
    assert not resolves("teams[0].quotas.a10g-24gb.spot_gpu")
    assert not resolves("alerts.email")


@pytest.fixture(params=DOCS, ids=lambda doc: doc.name)
def doc(request) -> Path:
    return request.param


def test_every_bash_block_is_valid_shell(doc):
    assert blocks(doc, "bash")
    for body in blocks(doc, "bash"):
        check = subprocess.run(
            ["bash", "-n"], input=PLACEHOLDER.sub("x", body), capture_output=True, text=True
        )
        assert check.returncode == 0, f"{check.stderr}\n{body}"


def test_every_config_path_the_page_names_exists(doc):
    paths = [
        shlex.split(command)[4]
        for command in commands(doc)
        if command.startswith("pulumi config set --path")
    ]
    table = re.findall(r"^\| `([a-z_.\[\]<>]+)` \|", doc.read_text(), re.MULTILINE)
    assert len(paths) >= 4 and len(table) >= 10
    for path in paths + table:
        assert resolves(path), path


def test_every_stack_output_the_page_reads_is_exported(doc):
    cloud = "gcp" if doc.name == "deploy-gcp.md" else "aws"
    sources = "".join(p.read_text() for p in (REPO_ROOT / "components" / cloud).rglob("*.py"))
    exported = set(re.findall(r'pulumi\.export\(\s*"([a-z_]+)"', sources))
    read = {m for c in commands(doc) for m in re.findall(r"pulumi stack output (\w+)", c)}
    assert read and read <= exported, read - exported


def _queue_age_that_cannot_fire() -> dict:
    values = stack_values("prod")
    values["aws"]["alarms"]["queue_age_seconds"] = 600
    return values


def _zone_of_another_region() -> dict:
    values = stack_values("gcp-prod")
    values["zones"] = ["us-central1-a", "europe-west4-a"]
    return values


@pytest.mark.parametrize(
    ("doc", "broken"),
    [(DOCS[0], _queue_age_that_cannot_fire), (DOCS[1], _zone_of_another_region)],
    ids=lambda value: getattr(value, "name", ""),
)
def test_the_config_error_shown_is_the_one_the_schema_gives(doc, broken):
    with pytest.raises(ConfigError) as caught:
        load_config(broken(), namespace="spot-training")
    (shown,) = blocks(doc, "console")
    assert shown.strip() == f"error: {caught.value}"


@pytest.mark.parametrize(
    "command",
    # `spotctl preflight` asks the account: it is the one command of the pages that is not offline.
    [
        c
        for doc in DOCS
        for c in commands(doc)
        if c.startswith(".venv/bin/spotctl") and not c.startswith(".venv/bin/spotctl preflight")
    ],
    ids=lambda c: c[18:],
)
def test_offline_commands_run_as_printed(command):
    spotctl = str(Path(sys.executable).with_name("spotctl"))
    result = subprocess.run(
        [spotctl, *shlex.split(command)[1:]],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
