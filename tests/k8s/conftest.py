"""One offline preview and render of the prod stack, shared by the Kubernetes layer tests."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spotctl.preview import PreviewResource, preview_program
from spotctl.render import Rendered, render, write

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def prod_preview() -> tuple[list[PreviewResource], float]:
    """(previewed resources, seconds the preview took)."""
    started = time.perf_counter()
    resources = preview_program(REPO_ROOT, "prod")
    return resources, time.perf_counter() - started


@pytest.fixture(scope="session")
def prod_render(
    prod_preview: tuple[list[PreviewResource], float], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Rendered, Path, float]:
    """(rendered objects, the directory they were written to, seconds preview + render took)."""
    resources, preview_s = prod_preview
    out = tmp_path_factory.mktemp("render-prod")
    started = time.perf_counter()
    rendered = render(resources)
    write(rendered, out)
    return rendered, out, preview_s + time.perf_counter() - started
