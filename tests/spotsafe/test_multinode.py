"""Multi-node training with no single point of failure: real torchrun agents on loopback.

Each "node" runs what the team's multi-node template runs (`spotsafe-run` and its arguments,
one gloo rank per node here), in a session of its own so a test can take the whole node away;
the rendezvous store runs what the team's store Deployment runs, in a process of its own. A
preempted node stops every rank at one step with one durable save; its agent exits 75, and the
other re-forms the gang in place with the node's replacement and resumes. No agent ever exits
1, and the weights equal an uninterrupted run at the same world size.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

from spotsafe.preemption import EXIT_PREEMPTED
from spotsafe_harness import RendezvousStore, with_bin_on_path

from components.k8s.jobs import TrainingJobSpec, multi_node_job
from components.k8s.placement import class_placement

EVERY = 100
# How long the template's agents wait for their gang: twice the class's replacement_time.
TEMPLATE_WAIT_S = TrainingJobSpec.rendezvous_timeout_s
_VAR = re.compile(r"\$\((\w+)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """$(NAME) from the container's env, as Kubernetes expands commands and env values."""
    return _VAR.sub(lambda m: env[m[1]], value)


class Agent:
    """One node: the template's command with its env, and everything its ranks log."""

    def __init__(
        self,
        endpoint: str,
        job_uid: str,
        uri: str,
        steps: int,
        join_timeout_s: int = TEMPLATE_WAIT_S,
    ) -> None:
        root, run_name = uri.rsplit("/", 1)
        spec = TrainingJobSpec(
            name=run_name, namespace="team-a", local_queue="training",
            service_account="training", priority_class="training-preemptible",
            checkpoint_root=root, image="image", notice_seconds=30, gpus=0,
            placement=class_placement("a10g-24gb", "spot"),
            rendezvous_endpoint=endpoint, rendezvous_timeout_s=join_timeout_s,
            command=("python", "-m", "spotsafe.examples.train", "--steps", str(steps),
                     "--checkpoint-uri", "$(CHECKPOINT_URI)", "--every-steps", str(EVERY)),
        )  # fmt: skip
        job = multi_node_job(spec, min_nodes=2, max_nodes=2)
        [container] = job["spec"]["template"]["spec"]["containers"]
        # What the downward API gives the pod: its Job's name and uid, and its own address.
        env = {"RUN_NAME": run_name, "JOB_UID": job_uid, "POD_IP": "127.0.0.1"}
        for var in container["env"]:
            if "value" in var:
                env[var["name"]] = expand(var["value"], env)
        command = [expand(arg, env) for arg in container["command"]]
        # A dead peer leaves the rendezvous after 3 s of missed heartbeats, not 15.
        conf = next(i for i, arg in enumerate(command) if arg.startswith("--rdzv-conf="))
        command[conf] += ",keep_alive_interval=1"
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**with_bin_on_path(), **env},
        )
        self.lines: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in (self.proc.stdout, self.proc.stderr)
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, start: int = 0, timeout: float = 120) -> re.Match:
        """The first line from index `start` on that matches; fails if the agent exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exited = self.proc.poll() is not None
            for line in self.lines[start:]:
                if match := re.search(pattern, line):
                    return match
            assert not exited, f"exited {self.proc.returncode}:\n" + "\n".join(self.lines[-40:])
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in {timeout:.0f} s:\n" + "\n".join(self.lines[-40:]))

    def exit_code(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join()
        return code

    def results(self, start: int = 0) -> list[dict]:
        """What rank 0 printed from index `start` on: a JSON line per run of the ranks."""
        return [json.loads(line) for line in self.lines[start:] if line.startswith("{")]

    def lose_node(self) -> None:
        """The node is gone at once, with no notice: SIGKILL to the agent and all it started."""
        for pid in [self.proc.pid, *_descendants(self.proc.pid)]:
            with contextlib.suppress(ProcessLookupError):  # gone already
                os.kill(pid, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return children + [d for child in children for d in _descendants(child)]


def first_to_log(agents: list[Agent], pattern: str, timeout: float = 120) -> Agent:
    """The first of the agents to log a line matching `pattern` from now on."""
    seen = [len(agent.lines) for agent in agents]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for agent, start in zip(agents, seen, strict=True):
            if any(re.search(pattern, line) for line in agent.lines[start:]):
                return agent
            assert agent.proc.poll() is None, "\n".join(agent.lines[-40:])
        time.sleep(0.1)
    raise AssertionError(f"no agent logged {pattern!r} in {timeout:.0f} s")


def test_sigterm_to_each_agent_in_turn_and_a_lost_node_count_no_failure(
    rendezvous: RendezvousStore, s3_uri: str
) -> None:
    run = uuid.uuid4().hex

    def node() -> Agent:
        return Agent(rendezvous.endpoint, run, s3_uri, steps=1_000_000)

    first, second = node(), node()
    # Rank 0 commits. Its agent hosts the ranks' own store; without a rendezvous store of its
    # own, the same node would host the rendezvous too.
    host = first_to_log([first, second], "committed step")
    other = second if host is first else first

    def preempt(victim: Agent, survivor: Agent) -> tuple[Agent, str]:
        """SIGTERM to the victim's agent: every rank stops at one step and saves it; the
        survivor re-forms the gang with the node's replacement, and both resume there."""
        seen = len(survivor.lines)
        victim.proc.send_signal(signal.SIGTERM)
        assert victim.exit_code() == EXIT_PREEMPTED
        stop = survivor.wait_for(r"final save at step (\d+) durable", seen)[1]
        replacement = node()
        survivor.wait_for(rf"resumed from step {stop}\b", seen)
        replacement.wait_for(rf"resumed from step {stop}\b")
        return replacement, stop

    # 1. A node other than rank 0's is preempted; 2. then rank 0's.
    replacement, _ = preempt(other, host)
    second_replacement, stop = preempt(host, replacement)

    # 3. A node is lost with no notice. The survivor's rank fails; its agent restarts it in
    #    place (torchrun's --max-restarts, not the Job's backoffLimit) and the gang resumes
    #    from the newest checkpoint once the lost node's replacement has joined.
    first_to_log([replacement, second_replacement], "committed step")
    seen = len(second_replacement.lines)
    replacement.lose_node()
    third_replacement = node()
    resumed = second_replacement.wait_for(r"resumed from step (\d+)", seen)[1]
    third_replacement.wait_for(rf"resumed from step {resumed}\b")
    assert int(resumed) > int(stop)
    assert second_replacement.proc.poll() is None, "the survivor kept running"

    # 4. Both nodes are preempted at once.
    gang = [second_replacement, third_replacement]
    seen = [len(agent.lines) for agent in gang]
    for agent in gang:
        agent.proc.send_signal(signal.SIGTERM)
    assert [agent.exit_code() for agent in gang] == [EXIT_PREEMPTED] * 2
    [stopped] = [r for agent, n in zip(gang, seen, strict=True) for r in agent.results(n)]
    assert stopped["preempted"] and stopped["fitted_deadline"], stopped

    # Two nodes trained without interruption to the same step end with the same weights.
    reference_uri = f"s3://{urlparse(s3_uri).netloc}/{uuid.uuid4().hex}"
    reference_run = uuid.uuid4().hex
    reference = [
        Agent(rendezvous.endpoint, reference_run, reference_uri, steps=stopped["final_step"])
        for _ in range(2)
    ]
    assert [agent.exit_code(timeout=120) for agent in reference] == [0, 0]
    [uninterrupted] = [r for agent in reference for r in agent.results()]
    assert uninterrupted["final_step"] == stopped["final_step"]
    assert uninterrupted["weights_sha256"] == stopped["weights_sha256"]
    assert rendezvous.proc.poll() is None, "the store outlived every node"


def test_a_lost_node_with_no_replacement_frees_the_survivor_uncounted(
    rendezvous: RendezvousStore, s3_uri: str
) -> None:
    """The survivor's ranks fail on the lost peer, its agent waits join_timeout for the gang to
    re-form, and then stops with 75: requeued, not counted, its GPUs held no longer than that."""
    run, join_timeout_s = uuid.uuid4().hex, 10
    agents = [Agent(rendezvous.endpoint, run, s3_uri, 1_000_000, join_timeout_s) for _ in "ab"]
    lost = first_to_log(agents, "committed step")
    [survivor] = [agent for agent in agents if agent is not lost]
    lost.lose_node()
    lost_at = time.monotonic()
    assert survivor.exit_code(timeout=join_timeout_s + 120) == EXIT_PREEMPTED
    idle_s = time.monotonic() - lost_at
    [line] = [x for x in survivor.lines if "did not re-form" in x]
    assert f"node(s) 127.0.0.1 (agent pid {lost.proc.pid}) left" in line, line
    # GPU-seconds held idle per lost node, per GPU of the survivor: the wait and the stop.
    assert join_timeout_s <= idle_s < join_timeout_s + 60, idle_s
    beyond_s = idle_s - join_timeout_s  # finding the peer gone, and stopping
    print(
        f"idle seconds per lost node, per survivor GPU: {idle_s:.1f} with a {join_timeout_s} s "
        f"wait, so {TEMPLATE_WAIT_S + beyond_s:.0f} with the template's {TEMPLATE_WAIT_S} s "
        f"(it was {1800 + beyond_s:.0f} with 1800 s)"
    )
