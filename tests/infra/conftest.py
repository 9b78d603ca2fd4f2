"""Previews of the repository's stacks, run once per session on Pulumi's mock engine."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from spotctl.preview import PreviewResource, preview_program

REPO_ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.name.split(".")[1] for p in (REPO_ROOT / "stacks").glob("Pulumi.*.yaml"))


class Preview:
    """One stack's previewed resources, with lookups by type and name."""

    def __init__(self, stack: str, resources: list[PreviewResource], seconds: float) -> None:
        self.stack, self.resources, self.seconds = stack, resources, seconds
        self.by_urn = {r.urn: r for r in resources}

    def of_type(self, token: str) -> list[PreviewResource]:
        return [r for r in self.resources if r.type == token]

    def one(self, token: str, name_contains: str = "") -> PreviewResource:
        found = [r for r in self.of_type(token) if name_contains in r.name]
        assert len(found) == 1, f"expected one {token} named *{name_contains}*, got {found}"
        return found[0]

    def children(self, parent: PreviewResource) -> list[PreviewResource]:
        return [r for r in self.resources if r.parent == parent.urn]


@pytest.fixture(scope="session")
def stack_preview() -> Callable[[str], Preview]:
    """Preview a repository stack (strict about deprecations), once per session."""
    cache: dict[str, Preview] = {}

    def get(stack: str) -> Preview:
        if stack not in cache:
            start = time.perf_counter()
            resources = preview_program(REPO_ROOT, stack, strict_deprecations=True)
            cache[stack] = Preview(stack, resources, time.perf_counter() - start)
        return cache[stack]

    return get


@pytest.fixture(scope="session")
def prod(stack_preview) -> Preview:
    return stack_preview("prod")


def stack_values(stack: str) -> dict:
    """The stack file's config, keyed by schema field (as __main__.py decodes it)."""
    document = yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return {key.split(":", 1)[1]: value for key, value in document["config"].items()}


@pytest.fixture
def program_copy(tmp_path: Path) -> Callable[[str, dict], Path]:
    """A copy of this repository's program whose only stack has the given config values."""

    def make(stack: str, values: dict) -> Path:
        (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
        (tmp_path / "__main__.py").symlink_to(REPO_ROOT / "__main__.py")
        config = {f"spot-training:{key}": value for key, value in values.items()}
        (tmp_path / "stacks").mkdir(exist_ok=True)
        stack_file = tmp_path / "stacks" / f"Pulumi.{stack}.yaml"
        stack_file.write_text(yaml.safe_dump({"config": config}))
        return tmp_path

    return make
