"""Exits that match the README: once the run's work is durable, a SIGTERM at any moment (the
end of the block, evaluation after it, the interpreter's own shutdown) ends the process with
the run's exit code, never with a kill and never with a traceback; a restart of a finished run
trains nothing and writes no progress."""

from __future__ import annotations

from pathlib import Path

import torch
from spotsafe import Run
from spotsafe_harness import benchmark_summary

SIGTERM_EXITS = Path(__file__).parents[2] / "benchmarks" / "sigterm_exits.py"


def test_sigterm_after_the_last_step_exits_with_the_runs_code() -> None:
    # The benchmark's trials, fewer of them (its full run is the figure: --trials 300).
    summary = benchmark_summary(SIGTERM_EXITS, trials=40, timeout=600)
    assert (summary["kills"], summary["wrong_codes"], summary["tracebacks"]) == (0, 0, 0), summary
    # The others came after the exit: the window is calibrated on four runs, so a loaded machine
    # sends fewer inside it.
    assert summary["sigterms"] >= 10, summary
    # The moments spread over the phases: some met the handler, some the interpreter's exit.
    assert 0 < summary["exited_by_handler"] < summary["sigterms"], summary


def test_a_finished_runs_restart_writes_no_progress(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    uri = f"file://{tmp_path}/run"
    with Run(uri, {"model": model}, every_steps=2) as run:
        for _ in run.steps(4):
            model.weight.data.add_(1)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    with Run(uri, {"model": model}, every_steps=2) as run:
        assert list(run.steps(4)) == []
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    # Its attempt record alone is new: claiming it is what fences an earlier attempt's zombie.
    assert [str(p) for p in set(after) - set(before)] == ["run/attempts/0000000002.json"]
