"""Two gloo ranks, a SIGTERM to one of them: both stop at the same step with its deadline."""

from __future__ import annotations

import json
import signal
import textwrap

from spotsafe_harness import start_ranks

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
    env = {"SPOTSAFE_NOTICE_SOURCES": "sigterm", "SPOTSAFE_SIGTERM_GRACE_S": "15"}
    ranks = start_ranks(RANK_LOOP, env=env)
    for proc in ranks:
        assert json.loads(proc.stdout.readline()) == {"ready": True}
    ranks[1].send_signal(signal.SIGTERM)
    results = [json.loads(proc.communicate(timeout=30)[0]) for proc in ranks]

    assert [proc.returncode for proc in ranks] == [0, 0]
    assert results[0]["step"] == results[1]["step"] > 5
    assert results[0]["deadline"] == results[1]["deadline"] is not None
