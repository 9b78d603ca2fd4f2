"""`spotsafe-run` is torchrun whose exit code tells a preemption (75) from a failure (its own
code). Real launchers and real rank processes; the ranks are plain scripts, so each case costs
one torch import."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import spotsafe
from spotsafe import launcher
from spotsafe.preemption import EXIT_PREEMPTED
from spotsafe_harness import RendezvousStore

SPOTSAFE_RUN = str(Path(sys.executable).parent / "spotsafe-run")

# Rank r exits with argv[1 + r]; "kill" makes it SIGKILL itself, "wait" waits for a SIGTERM
# and exits 75 on it, as the runtime does after its final save, "crash" exits 1 on it instead
# (a rank whose loader worker died of it); "launcher" prints what tells the runtime its
# launcher.
RANK = textwrap.dedent(
    """
    import os, signal, sys, time
    action = sys.argv[1 + int(os.environ["RANK"])]
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action in ("wait", "crash"):
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(75 if action == "wait" else 1))
        print("ready", flush=True)
        time.sleep(60)
    if action == "launcher":  # what the runtime reads to warn about a launcher losing 75
        print(os.environ["SPOTSAFE_LAUNCHER"], "TORCHELASTIC_RUN_ID" in os.environ)
        sys.exit(0)
    sys.exit(int(action))
    """
)


def launch(
    tmp_path: Path, *actions: str, rendezvous: str = "", join_timeout: int = 3
) -> subprocess.Popen:
    """One node, its ranks taking the actions; its own rendezvous, or the store at host:port."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    meet = ["--standalone"]
    if rendezvous:
        meet = ["--nnodes=1", "--rdzv-backend=c10d", f"--rdzv-endpoint={rendezvous}",
                "--rdzv-id=run",
                f"--rdzv-conf=is_host=false,join_timeout={join_timeout}"]  # fmt: skip
    return subprocess.Popen(
        [SPOTSAFE_RUN, *meet, f"--nproc-per-node={len(actions)}", str(script), *actions],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_ready(proc: subprocess.Popen, ranks: int) -> None:
    """Until every rank said "ready"; ranks share the pipe, so two may land on one line."""
    said = 0
    while said < ranks:
        line = proc.stdout.readline()
        assert line, f"the launcher ended before {ranks} ranks were ready: {proc.stderr.read()}"
        said += line.count("ready")


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
    wait_ready(proc, ranks=2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    # torchrun forwards the SIGTERM to the ranks, waits for them and exits 1.
    assert proc.returncode == EXIT_PREEMPTED, err
    assert "SIGTERM: stopped for a preemption; exit 75" in err


def test_a_rank_that_crashes_on_the_sigterm_is_a_failure_not_a_preemption(
    tmp_path: Path,
) -> None:
    proc = launch(tmp_path, "wait", "crash")
    wait_ready(proc, ranks=2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    [line] = [line for line in err.splitlines() if line.startswith("SIGTERM:")]
    assert re.fullmatch(
        r"SIGTERM: local rank 1 \(pid \d+\) failed \(exit 1\) while the ranks stopped for a "
        r"preemption: exit 1, not 75",
        line,
    ), line


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([EXIT_PREEMPTED, EXIT_PREEMPTED], EXIT_PREEMPTED),
        ([EXIT_PREEMPTED, 0], EXIT_PREEMPTED),  # one rank had finished
        ([0, 0], 0),  # the SIGTERM came after the end
        ([-signal.SIGTERM], EXIT_PREEMPTED),  # a rank still starting: nothing to save
        ([], EXIT_PREEMPTED),  # no rank started yet
        ([EXIT_PREEMPTED, -signal.SIGKILL], 128 + signal.SIGKILL),  # its save outlasted the grace
        ([1, EXIT_PREEMPTED], 1),
    ],
)
def test_exit_code_after_a_sigterm_tells_a_crash(codes: list[int], expected: int) -> None:
    assert launcher.exit_code(codes, sigterm=True) == expected


def test_a_rendezvous_store_lost_after_the_ranks_ran_is_a_stop_not_a_failure(
    tmp_path: Path, rendezvous: RendezvousStore
) -> None:
    proc = launch(tmp_path, "wait", "wait", rendezvous=rendezvous.endpoint)
    wait_ready(proc, ranks=2)
    rendezvous.proc.kill()  # its stable node failed
    # torchrun stops the ranks with SIGTERM (they save and exit 75), then fails itself.
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_PREEMPTED, err
    assert "rendezvous store lost" in err


def test_a_store_that_never_answers_is_one_clear_line(tmp_path: Path) -> None:
    proc = launch(tmp_path, "0", rendezvous="127.0.0.1:1")  # join_timeout=3
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert err.splitlines()[-1] == "error: no rendezvous store at 127.0.0.1:1 in 3 s"
    assert "Traceback" not in err


def test_sigterm_while_waiting_for_the_store_exits_75_at_once(tmp_path: Path) -> None:
    """A replacement pod whose store is still coming back is preempted: it must not sit out
    the grace period in a connect that holds signals, and be killed (137, a failure)."""
    proc = launch(tmp_path, "0", rendezvous="127.0.0.1:1", join_timeout=600)
    for line in proc.stderr:
        if "no rendezvous store at 127.0.0.1:1 yet" in line:
            break
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == EXIT_PREEMPTED
    assert time.monotonic() - sent < 10


def test_the_readme_command_means_what_it_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's spotsafe-run line, read by torchrun's parser and the trainer's."""
    from spotsafe.examples.train import parse_args as trainer_args
    from torch.distributed.run import config_from_args, parse_args

    readme = (Path(spotsafe.__file__).parents[1] / "README.md").read_text()
    section = readme.split("## `spotsafe-run`", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    command = shlex.split(block.replace("\\\n", " "))
    assert command[0] == "spotsafe-run"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torchrun would set it for the whole process
    config, program, program_args = config_from_args(parse_args(command[1:]))
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (2, 4, 8)
    assert config.rdzv_configs["is_host"] == "false"
    assert [program, *program_args[:2]] == ["python", "-m", "spotsafe.examples.train"]
    cfg, _ = trainer_args(program_args[2:])
    assert cfg.checkpoint_uri == "s3://bucket/team-a/run-7"


def test_ranks_know_their_launcher_and_warn_under_plain_torchrun(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = launch(tmp_path, "launcher")
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out.split()) == (0, ["spotsafe-run", "True"]), err
    assert not launcher.warn_if_exit_code_lost(
        {"TORCHELASTIC_RUN_ID": "run", launcher.LAUNCHER_ENV: "x"}
    )
    assert not launcher.warn_if_exit_code_lost({})  # no launcher at all
    assert launcher.warn_if_exit_code_lost({"TORCHELASTIC_RUN_ID": "run"})  # plain torchrun
    [line] = caplog.messages
    assert "exits 1 when the ranks stop for a preemption" in line and "spotsafe-run" in line
