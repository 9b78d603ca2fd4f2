"""Previews of the repository's stacks, run once per session on Pulumi's mock engine."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from previewed import Preview
from stack_files import REPO_ROOT

from spotctl.preview.resources import preview_program


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
