"""benchmarks/gpu.sh and gpu_check.py, in the parts a machine without a GPU can run: the guard,
and the exact-resume check and its verdict with real trainer runs on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys

from stack_files import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import gpu_check  # noqa: E402


def test_gpu_sh_exits_non_zero_without_a_gpu() -> None:
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "benchmarks" / "gpu.sh"), "--fast"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert result.returncode == 2
    assert "no CUDA device" in result.stderr


def test_the_exact_resume_check_passes_on_cpu_and_names_a_mismatch(tmp_path) -> None:
    reference, resumed = gpu_check.exact_resume("cpu")
    assert gpu_check.mismatch(reference, resumed) is None
    shorter = gpu_check.trainer("cpu", f"file://{tmp_path}/shorter", gpu_check.STEPS - 1)
    shorter["resumed_from"] = resumed["resumed_from"]
    assert "weights differ" in gpu_check.mismatch(reference, shorter)
    assert "not step" in gpu_check.mismatch(reference, {**resumed, "resumed_from": None})
