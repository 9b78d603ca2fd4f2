"""The example trainer under the real launcher, torchrun, with two gloo ranks. A SIGTERM to the
launcher reaches both ranks; they stop at one step and save it once, sharded. One plain process
resumes that checkpoint (resharding), and two ranks resume it bitwise-exactly; two ranks also
resume a single-process checkpoint."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from urllib.parse import urlparse

import boto3
from spotsafe import Checkpointer
from spotsafe_harness import run_trainer, s3_keys

STEPS, EVERY = 3000, 100
ENV = {"SPOTSAFE_NOTICE_SOURCES": "sigterm", "SPOTSAFE_SIGTERM_GRACE_S": "30"}


def torchrun(uri: str, steps: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "spotsafe.examples.train",
         "--steps", str(steps), "--checkpoint-uri", uri, "--every-steps", str(EVERY)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ENV},
    )  # fmt: skip


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def copy_prefix(src: str, dst: str) -> None:
    s3 = boto3.client("s3")
    (bucket, src_prefix), dst_prefix = (
        (urlparse(src).netloc, urlparse(src).path.strip("/")),
        urlparse(dst).path.strip("/"),
    )
    for key in s3_keys(src):
        s3.copy_object(
            Bucket=bucket,
            Key=f"{dst_prefix}/{key}",
            CopySource={"Bucket": bucket, "Key": f"{src_prefix}/{key}"},
        )


def test_sigterm_to_torchrun_stops_both_ranks_at_one_step_and_one_process_resumes(
    s3_uri: str,
) -> None:
    proc = torchrun(s3_uri, STEPS)
    for line in proc.stderr:  # rank 0 logs each commit: both ranks are training by the first
        if "committed step" in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)

    # torchrun forwards SIGTERM to the workers, waits for them, then re-raises the signal as a
    # SignalException: the launcher exits 1, not the workers' 75.
    assert proc.returncode == 1 and "SignalException" in err, err
    [stopped] = json_lines(out)  # rank 0 alone prints
    stop = stopped["final_step"]
    assert stopped["preempted"] and stopped["fitted_deadline"], stopped
    assert EVERY <= stop < STEPS
    assert re.findall(r"preemption: final save at step (\d+)", err) == [str(stop)] * 2
    assert re.findall(r"final save at step (\d+) durable", err) == [str(stop)] * 2

    manifest = Checkpointer(s3_uri, read_only=True).candidates()[0]
    assert (manifest.step, manifest.world_size, manifest.kind) == (stop, 2, "dcp")
    shards = {o.key.rsplit("/", 1)[1] for o in manifest.objects}
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata"} <= shards
    copy = f"{s3_uri}-copy"
    copy_prefix(s3_uri, copy)

    # One plain process loads the two ranks' checkpoint, resharded, and trains on.
    code, resumed, err = run_trainer(
        "--steps", str(stop + 20), "--checkpoint-uri", s3_uri, env=ENV
    )  # fmt: skip
    assert code == 0, err
    assert (resumed["resumed_from"], resumed["final_step"]) == (stop, stop + 20)
    assert resumed["skipped"] == []

    # Two ranks resume the same checkpoint and end bitwise equal to an uninterrupted run: model,
    # AdamW moments, LR schedule, RNG and data position all came back through the sharded path.
    resumed2 = torchrun(copy, stop + 20).communicate(timeout=60)
    reference = torchrun(f"s3://{urlparse(s3_uri).netloc}/{uuid.uuid4().hex}", stop + 20)
    reference_out = reference.communicate(timeout=60)
    assert reference.returncode == 0, reference_out[1]
    [after], [uninterrupted] = json_lines(resumed2[0]), json_lines(reference_out[0])
    assert after["resumed_from"] == stop, resumed2[1]
    assert after["weights_sha256"] == uninterrupted["weights_sha256"]
    assert uninterrupted["weights_sha256"] != resumed["weights_sha256"], "ranks' data differ"


def test_two_ranks_resume_a_single_process_checkpoint(s3_uri: str) -> None:
    code, single, err = run_trainer(
        "--steps", "200", "--checkpoint-uri", s3_uri, "--every-steps", str(EVERY), env=ENV
    )  # fmt: skip
    assert code == 0 and single["final_step"] == 200, err
    assert Checkpointer(s3_uri, read_only=True).candidates()[0].kind == "torch"

    # Every rank loads the whole single-process state (it is replicated), then trains on sharded.
    proc = torchrun(s3_uri, 300)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    [result] = json_lines(out)
    assert (result["resumed_from"], result["final_step"]) == (200, 300)
    assert result["skipped"] == []
    manifest = Checkpointer(s3_uri, read_only=True).candidates()[0]
    assert (manifest.step, manifest.world_size, manifest.kind) == (300, 2, "dcp")
