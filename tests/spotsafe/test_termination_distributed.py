"""Two gloo ranks train sharded state; a SIGTERM reaches one of them. Both stop at the same step,
save it once through torch.distributed.checkpoint, exit 75; one process then resumes it."""

from __future__ import annotations

import json
import signal
import textwrap

import torch
from spotsafe import Checkpointer, Extras
from spotsafe.preemption import EXIT_PREEMPTED
from spotsafe_harness import start_ranks

# Each step adds 1 to every element of a row-sharded weight, so the weight is its step count.
RANK_TRAIN = textwrap.dedent(
    """
    import json, os, sys, time, torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from spotsafe import Checkpointer, Extras
    from spotsafe.preemption import EXIT_PREEMPTED, PreemptionGuard

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    weight = distribute_tensor(torch.zeros(8, 6), mesh, [Shard(0)])
    state = {"model": Extras(weight=weight)}
    ckpt = Checkpointer(sys.argv[1], every_steps=1000)
    with PreemptionGuard.from_env() as guard:
        step = 0
        while not guard.stopped:
            step += 1
            weight.to_local().add_(1.0)
            time.sleep(0.01)
            guard.check()
            if step == 5:
                print("ready", flush=True)
        final = guard.final_save(ckpt, step, state)
    print(json.dumps({"rank": dist.get_rank(), "step": step, **final}), flush=True)
    dist.destroy_process_group()
    sys.exit(EXIT_PREEMPTED)
    """
)


def test_two_ranks_stop_at_one_step_save_it_and_one_process_resumes(s3_uri: str) -> None:
    env = {"SPOTSAFE_NOTICE_SOURCES": "sigterm", "SPOTSAFE_SIGTERM_GRACE_S": "30"}
    ranks = start_ranks(RANK_TRAIN, s3_uri, env=env)
    for proc in ranks:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    ranks[1].send_signal(signal.SIGTERM)  # the node under rank 1 is going
    outputs = [proc.communicate(timeout=120) for proc in ranks]
    assert [proc.returncode for proc in ranks] == [EXIT_PREEMPTED] * 2, outputs
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]

    stop = results[0]["step"]
    assert results[1]["step"] == stop > 5, "both ranks stopped at the same step"
    assert results[0]["deadline"] == results[1]["deadline"], "rank 0 learnt rank 1's deadline"
    assert all(r["fitted_deadline"] for r in results)

    state = {"model": Extras(weight=torch.zeros(8, 6))}
    reader = Checkpointer(s3_uri)
    assert reader.restore(state) == stop, "one process resumes the two ranks' final save"
    assert reader.candidates()[0].world_size == 2
    assert torch.equal(state["model"]["weight"], torch.full((8, 6), float(stop)))
