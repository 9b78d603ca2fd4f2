"""Previews of the repository's stacks, run once per session on Pulumi's mock engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from previewed import Preview
from stack_files import REPO_ROOT

from spotctl.preview import preview_program


@pytest.fixture(scope="session")
def stack_preview() -> Callable[[str], Preview]:
    """Preview a repository stack (strict about deprecations), once per session."""
    cache: dict[str, Preview] = {}

    def get(stack: str) -> Preview:
        if stack not in cache:
            resources = preview_program(REPO_ROOT, stack, strict_deprecations=True)
            cache[stack] = Preview(stack, resources)
        return cache[stack]

    return get


@pytest.fixture(scope="session")
def prod(stack_preview) -> Preview:
    return stack_preview("prod")


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
