"""The benchmark runs end to end against its own server and ends with its JSON figures: every
contract field, each figure beside its baseline, a size sweep, the 2-rank sharded figure and the
peak memory of a save. The fast mode uses small states; the full sweep is run by hand."""

from __future__ import annotations

import json
import subprocess
import sys

SWEEP_FIELDS = ("state_bytes", "save_s", "baseline_upload_s", "restore_s", "baseline_restore_s",
                "blocked_s", "memcpy_s")  # fmt: skip


def test_bench_prints_every_figure_with_its_baseline() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spotsafe.bench", "--json", "--fast", "--repeats", "2",
         "--rounds", "1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    for field in SWEEP_FIELDS:  # today's top-level figures: the first sweep entry's
        assert figures[field] > 0, field
        assert figures[field] == figures["sweep"][0][field], field
    assert -100 < figures["step_overhead_pct"] < 100
    assert figures["step_overhead_pct_60s"] < figures["step_overhead_pct"]

    sweep = figures["sweep"]
    assert [e["state_bytes"] > 10_000_000 for e in sweep] == [True, True]
    assert sweep[1]["state_bytes"] > 1.5 * sweep[0]["state_bytes"]
    for entry in sweep:
        for field in SWEEP_FIELDS:
            assert entry[field] > 0, field
            if field != "state_bytes":
                low, high = entry["spread"][field]
                assert low <= entry[field] <= high, field
    assert figures["local_sweep"] == []  # small states: all on S3
    assert set(figures["slopes_s_per_gb"]) == {"s3"}
    assert set(figures["slopes_s_per_gb"]["s3"]) == set(SWEEP_FIELDS) - {"state_bytes"}

    sharded = figures["sharded"]
    assert sharded["ranks"] == 2
    assert len(sharded["blocked_s"]) == len(sharded["memcpy_s"]) == 2
    assert min(sharded["blocked_s"] + sharded["memcpy_s"]) > 0
    assert sharded["save_s"] > 0 and sharded["baseline_upload_s"] > 0
    low, high = sharded["ratio_spread"]["save_s"]
    assert 0 < low <= high

    # A save holds its staging copy (the state) plus a bounded number of parts; the baseline
    # holds a full serialised copy besides.
    assert sweep[0]["state_bytes"] < figures["peak_extra_bytes"]
    assert figures["peak_extra_bytes"] < figures["baseline_peak_extra_bytes"]

    assert any(line.lstrip().startswith("save_s") and "baseline_upload_s" in line for line in lines)
    assert any(line.startswith("sharded rank 1: blocked_s") for line in lines)
    assert any(line.startswith("sharded (2 ranks") and "(goal <= 1.1)" in line for line in lines)
    assert any(line.startswith("peak extra memory") for line in lines)
