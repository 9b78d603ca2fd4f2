"""The training image's Dockerfile passes hadolint and checkov (with the project's own checks), and
it installs the torch release the tests run on: one pin, training-image/torch.txt, read by both."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import torch
from checkov_run import checkov

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "training-image" / "Dockerfile"
BIN = Path(sys.executable).parent


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [str(BIN / "hadolint"), "--no-color", str(DOCKERFILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_checkov_reports_no_failed_checks() -> None:
    result = checkov("-f", str(DOCKERFILE), "--framework", "dockerfile")
    report = json.loads(result.stdout)
    assert [c["check_id"] for c in report["results"]["failed_checks"]] == []
    passed = {c["check_id"] for c in report["results"]["passed_checks"]}
    # Pinned base (7), a non-root user (3, 8) and the health check decision (2) were checked.
    assert {"CKV_DOCKER_2", "CKV_DOCKER_3", "CKV_DOCKER_7", "CKV_DOCKER_8"} <= passed


def test_image_installs_what_the_package_declares() -> None:
    pinned = {
        line.split("==")[0]
        for line in (DOCKERFILE.parent / "requirements.txt").read_text().splitlines()
        if "==" in line
    }
    assert pinned == {
        "boto3",
        "google-crc32c",
        "numpy",
        "prometheus-client",
        "google-cloud-storage",
        "torchdata",
    }
    declared = (DOCKERFILE.parent / "pyproject.toml").read_text()
    assert all(f'"{name}>=' in declared for name in pinned)


def torch_pin() -> str:
    lines = [
        line.strip()
        for line in (DOCKERFILE.parent / "torch.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(lines) == 1 and re.fullmatch(r"torch==[\w.]+", lines[0]), lines
    return lines[0].removeprefix("torch==")


def test_image_and_tests_use_the_one_torch_pin() -> None:
    dockerfile = DOCKERFILE.read_text()
    (base,) = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert "torch" not in base, f"{base} would bring a torch of its own, untested"
    assert re.search(r"^COPY torch\.txt ", dockerfile, re.M)
    installs = re.findall(r"pip install[^\n]*", dockerfile)
    assert [i for i in installs if "torch" in i] == [
        'pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" --requirement torch.txt \\'
    ]
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "pip install -q --requirement training-image/torch.txt" in makefile
    assert "torch==" not in makefile
    assert torch.__version__.split("+")[0] == torch_pin(), "the tests run on the pinned torch"
