"""checkov as the tests run it: the binary of its own virtualenv, `.venv-checkov` (`make setup`
builds it from policies/checkov/requirements.txt; checkov's pins clash with the runtime's), with
the project's checks loaded and the repository on its path, since those checks import
`policies.spot_workloads`. JSON out, offline (no check metadata from the vendor's service)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
PROJECT_CHECKS = REPO_ROOT / "policies" / "checkov"


def checkov(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    assert CHECKOV.is_file(), f"no {CHECKOV}: `make setup` builds checkov's virtualenv"
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [str(CHECKOV), "--external-checks-dir", str(PROJECT_CHECKS), *args]
        + ["-o", "json", "--skip-download"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": path},
    )
