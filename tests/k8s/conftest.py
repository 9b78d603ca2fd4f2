"""One offline preview and render of the prod stack, shared by the Kubernetes layer tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotctl.preview.resources import PreviewResource
from spotctl.render.manifests import Rendered, render, write


@pytest.fixture(scope="session")
def prod_preview(stack_previews) -> list[PreviewResource]:
    return stack_previews("prod")


@pytest.fixture(scope="session")
def prod_render(
    prod_preview: list[PreviewResource], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Rendered, Path]:
    """(rendered objects, the directory they were written to)."""
    out = tmp_path_factory.mktemp("render-prod")
    rendered = render(prod_preview)
    write(rendered, out)
    return rendered, out
