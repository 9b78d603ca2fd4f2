"""`spotsafe-run` is torchrun whose exit code tells a preemption (75) from a failure (its own
code). Real launchers and real rank processes; the ranks are plain scripts, so each case costs
one torch import."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from spotsafe.launcher import exit_code
from spotsafe.preemption import EXIT_PREEMPTED

SPOTSAFE_RUN = str(Path(sys.executable).parent / "spotsafe-run")

# Rank r exits with argv[1 + r]; "kill" makes it SIGKILL itself, "wait" waits for a SIGTERM
# and exits 75 on it, as the runtime does after its final save.
RANK = textwrap.dedent(
    """
    import os, signal, sys, time
    action = sys.argv[1 + int(os.environ["RANK"])]
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "wait":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))
        print("ready", flush=True)
        time.sleep(60)
    sys.exit(int(action))
    """
)


def launch(tmp_path: Path, *actions: str) -> subprocess.Popen:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    return subprocess.Popen(
        [SPOTSAFE_RUN, "--standalone", f"--nproc-per-node={len(actions)}", str(script), *actions],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        (("75", "75"), EXIT_PREEMPTED),  # torchrun alone exits 1 here
        # A rank fails; torchrun stops the other, which saves and exits 75: still a failure.
        (("wait", "3"), 3),
        (("0", "kill"), 128 + signal.SIGKILL),
    ],
)
def test_ranks_exit_codes_pass_through_and_75_means_preempted(
    tmp_path: Path, actions: tuple[str, ...], expected: int
) -> None:
    proc = launch(tmp_path, *actions)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == expected, err
    if expected != EXIT_PREEMPTED:
        assert "FAILED" in err  # torchrun's failure report, naming the rank


def test_sigterm_to_the_launcher_exits_75(tmp_path: Path) -> None:
    proc = launch(tmp_path, "wait", "wait")
    for _ in range(2):
        assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    # torchrun forwards the SIGTERM to the ranks, waits for them and exits 1.
    assert proc.returncode == EXIT_PREEMPTED, err
    assert "the ranks stopped for a preemption" in err


def test_an_unreachable_rendezvous_is_one_clear_line(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    result = subprocess.run(
        [SPOTSAFE_RUN, "--nnodes=1", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:1",
         "--rdzv-conf=is_host=false,read_timeout=2", str(script), "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: rendezvous at 127.0.0.1:1 failed: ")
    assert "timed out" in line
    assert "Traceback" not in result.stderr


def test_exit_code_rule() -> None:
    assert exit_code([75, 75]) == 75
    # Ranks torchrun stopped with SIGTERM after another ended are not the cause.
    assert exit_code([75, -signal.SIGTERM]) == 75
    assert exit_code([-signal.SIGTERM, 2, 1]) == 2
    assert exit_code([-signal.SIGTERM]) == 128 + signal.SIGTERM
    assert exit_code([-signal.SIGKILL]) == 128 + signal.SIGKILL
