"""Shared fixtures: real local object-store servers, the third-party schemas, previews of the
repository's stacks, and copies of the program with a stack of given config values."""

from __future__ import annotations

import os

# One intra-op thread per torch process, as torchrun gives its ranks: the tests start hundreds of
# small torch processes beside each other on few cores, where OpenMP threads that spin waiting
# for work only take the cores from the processes beside them. Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
import yaml
from spotsafe.local.servers import LOCAL_AWS_ENV, gcs_server, s3_server
from stack_files import REPO_ROOT

# Third-party schemas live beside the repository, never inside it.
SHARED_SCHEMAS = REPO_ROOT.parent / "shared" / "schemas"


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    with s3_server() as url:
        yield url


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, s3_endpoint: str) -> str:
    """Point boto3 (and child processes) at the local S3-API server."""
    for key, value in LOCAL_AWS_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    return s3_endpoint


@pytest.fixture(scope="session")
def gcs_endpoint() -> str:
    with gcs_server() as url:
        yield url


@pytest.fixture(scope="session")
def shared_schemas() -> Path:
    assert SHARED_SCHEMAS.is_dir(), f"third-party schemas not found at {SHARED_SCHEMAS}"
    return SHARED_SCHEMAS


@pytest.fixture(scope="session")
def stack_previews() -> Callable[[str], list]:
    """Preview a repository stack once per session (the Kubernetes layer's tests and the
    runtime's team identities read the same stacks)."""
    from spotctl.preview.resources import (
        preview_program,  # the mock engine, for the tests that need it
    )

    return cache(lambda stack: preview_program(REPO_ROOT, stack))


@pytest.fixture(scope="session")
def prod_preview(stack_previews) -> list:
    return stack_previews("prod")


@pytest.fixture(scope="session")
def prod_render(prod_preview: list, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(rendered objects, the directory they were written to): the prod stack's manifests, for
    the Kubernetes layer's and the renderer's tests."""
    from spotctl.render.manifests import render, write

    out = tmp_path_factory.mktemp("render-prod")
    rendered = render(prod_preview)
    write(rendered, out)
    return rendered, out


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
