"""The benchmark runs end to end against its own server and ends with its JSON figures."""

from __future__ import annotations

import json
import subprocess
import sys


def test_bench_prints_every_figure_with_its_baseline() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spotsafe.bench", "--json", "--size", "small", "--repeats", "2",
         "--rounds", "1"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    for field in ("blocked_s", "memcpy_s", "save_s", "baseline_upload_s", "restore_s",
                  "baseline_restore_s"):  # fmt: skip
        assert figures[field] > 0, field
    assert figures["state_bytes"] > 50_000
    assert -100 < figures["step_overhead_pct"] < 100
    assert any(line.lstrip().startswith("save_s") and "baseline_upload_s" in line for line in lines)
