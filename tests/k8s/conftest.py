"""One offline render of the prod stack, shared by the Kubernetes layer tests."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spotctl.render import Rendered, render_stack, write

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def prod_render(tmp_path_factory: pytest.TempPathFactory) -> tuple[Rendered, Path, float]:
    """(rendered objects, the directory they were written to, seconds it took)."""
    out = tmp_path_factory.mktemp("render-prod")
    started = time.perf_counter()
    rendered = render_stack(REPO_ROOT, "prod")
    write(rendered, out)
    return rendered, out, time.perf_counter() - started
