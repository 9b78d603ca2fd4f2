"""Two gloo ranks, a SIGTERM to one of them: both stop at the same step with its deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

from spotsafe.local.servers import free_port

RANK_LOOP = textwrap.dedent(
    """
    import json, time
    import torch.distributed as dist
    from spotsafe.agreement import agree
    from spotsafe.termination import TerminationWatcher, WatcherConfig

    dist.init_process_group("gloo")
    with TerminationWatcher(WatcherConfig.from_env()) as watcher:
        step = 0
        while True:
            step += 1
            time.sleep(0.01)  # a training step
            watcher.poll()
            decision = agree(watcher.preemption, rebalance=False)
            if step == 5:
                print(json.dumps({"ready": True}), flush=True)
            if decision.stop:
                break
    print(json.dumps({"rank": dist.get_rank(), "step": step, "deadline": decision.deadline}))
    dist.destroy_process_group()
    """
)


def test_all_ranks_stop_at_the_same_step_when_one_is_told() -> None:
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "SPOTSAFE_NOTICE_SOURCES": "sigterm",
        "SPOTSAFE_SIGTERM_GRACE_S": "15",
    }
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_LOOP],
            env={**env, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    for proc in ranks:
        assert json.loads(proc.stdout.readline()) == {"ready": True}
    ranks[1].send_signal(signal.SIGTERM)
    results = [json.loads(proc.communicate(timeout=30)[0]) for proc in ranks]

    assert [proc.returncode for proc in ranks] == [0, 0]
    assert results[0]["step"] == results[1]["step"] > 5
    assert results[0]["deadline"] == results[1]["deadline"] is not None
