"""The example trainer under a real notice from each source: stop at a step boundary, save that
step, exit 75; the restart resumes from exactly that step and ends bitwise equal. What follows
the final save does not depend on where the notice came from, so one source's run is restarted."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import uuid

import pytest
from spotsafe.local.metadata import AwsImds, GceMetadata
from spotsafe.local.servers import LOCAL_AWS_ENV, free_port
from spotsafe.manifest import MANIFEST_NAME, step_of
from spotsafe.preemption import EXIT_PREEMPTED
from spotsafe_harness import create_bucket, result_of, s3_keys, start_trainer, wait_for_step

STEPS = 3000
RESTARTED = "sigterm"  # the source whose stopped run is restarted


def trainer(
    uri: str, env: dict[str, str], metrics_port: int | None = None, every_steps: int = 1000
) -> subprocess.Popen:
    args = ["--steps", str(STEPS), "--checkpoint-uri", uri, "--every-steps", str(every_steps)]
    if metrics_port:
        args += ["--metrics-port", str(metrics_port)]
    return start_trainer(*args, env=env)


@pytest.fixture(scope="module")
def bucket(s3_endpoint: str) -> str:
    return create_bucket(s3_endpoint, f"notices-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def reference_sha(bucket: str, s3_endpoint: str) -> str:
    env = {"AWS_ENDPOINT_URL": s3_endpoint, **LOCAL_AWS_ENV}
    code, result, _ = result_of(trainer(f"s3://{bucket}/reference", env))
    assert code == 0 and result["final_step"] == STEPS
    return result["weights_sha256"]


@pytest.mark.parametrize("source", ["sigterm", "aws", "gce"])
def test_notice_means_final_save_at_the_stop_step_then_exact_resume(
    source: str, bucket: str, aws_env: str, reference_sha: str
) -> None:
    uri = f"s3://{bucket}/{source}"
    env = {"AWS_ENDPOINT_URL": aws_env, **LOCAL_AWS_ENV, "SPOTSAFE_NOTICE_SOURCES": source}
    port = free_port()
    with AwsImds() as imds, GceMetadata() as gce:
        env |= {
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
            "SPOTSAFE_IMDS_POLL_S": "0.2",
            "GCE_METADATA_HOST": gce.url.removeprefix("http://"),
            "SPOTSAFE_SIGTERM_GRACE_S": "20",
        }
        proc = trainer(uri, env, metrics_port=port)
        wait_for_step(port, 100, proc)
        noticed = time.time()
        if source == "sigterm":
            proc.send_signal(signal.SIGTERM)
        elif source == "aws":
            imds.announce_interruption(noticed + 20)
        else:
            gce.preempt()
        code, stopped, _ = result_of(proc)

    assert code == EXIT_PREEMPTED
    assert stopped["preempted"] and stopped["notice_source"] == source
    assert 100 <= stopped["final_step"] < STEPS
    assert stopped["fitted_deadline"] is True
    assert stopped["durable_at"] - noticed < 5, "notice to durable within seconds"
    committed = [step_of(k) for k in s3_keys(uri) if k.endswith(MANIFEST_NAME)]
    assert max(committed) == stopped["final_step"], "the newest checkpoint is the stop step"

    if source == RESTARTED:
        code, resumed, _ = result_of(trainer(uri, {**env, "SPOTSAFE_NOTICE_SOURCES": "sigterm"}))
        assert code == 0
        assert resumed["resumed_from"] == stopped["final_step"], "zero lost steps"
        assert resumed["weights_sha256"] == reference_sha


def test_rebalance_recommendation_saves_at_once_and_trains_on(
    bucket: str, s3_endpoint: str, reference_sha: str
) -> None:
    uri = f"s3://{bucket}/rebalance"
    port = free_port()
    with AwsImds() as imds:
        env = {
            "AWS_ENDPOINT_URL": s3_endpoint,
            **LOCAL_AWS_ENV,
            "SPOTSAFE_NOTICE_SOURCES": "aws",
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
            "SPOTSAFE_IMDS_POLL_S": "0.2",
        }
        proc = trainer(uri, env, metrics_port=port)
        wait_for_step(port, 100, proc)
        imds.recommend_rebalance()
        code, result, log = result_of(proc)
    assert code == 0 and result["final_step"] == STEPS
    assert result["weights_sha256"] == reference_sha
    committed = [int(m) for m in re.findall(r"committed step (\d+)", log)]
    assert [s for s in committed if s % 1000], f"a save off the 1000-step cadence: {committed}"


def trainer_past_a_checkpoint(
    uri: str, proxy, monkeypatch: pytest.MonkeyPatch, grace_s: int
) -> subprocess.Popen:
    """A trainer that stores through the proxy and has committed its step-50 checkpoint."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    port = free_port()
    env = {"SPOTSAFE_NOTICE_SOURCES": "sigterm", "SPOTSAFE_SIGTERM_GRACE_S": str(grace_s)}
    proc = trainer(uri, env, metrics_port=port, every_steps=50)
    wait_for_step(port, 50, proc, metric="spotsafe_checkpoint_last_committed_step")
    return proc


def test_a_final_save_that_fails_still_exits_75_and_counts_the_lost_steps(
    s3_uri: str, proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = trainer_past_a_checkpoint(s3_uri, proxy, monkeypatch, grace_s=60)
    proxy.down()  # storage unreachable just as the notice comes
    proc.send_signal(signal.SIGTERM)
    code, stopped, log = result_of(proc)

    assert code == EXIT_PREEMPTED, log
    assert stopped["preempted"] and stopped["fitted_deadline"] is False
    assert stopped["durable_at"] is None
    committed_steps = [int(m) for m in re.findall(r"committed step (\d+)", log)]
    assert committed_steps, log
    committed = max(committed_steps)
    lost = stopped["final_step"] - committed
    assert lost > 0 and f"{lost} step(s) lost" in log

    proxy.restore()
    code, resumed, _ = result_of(trainer(s3_uri, {"SPOTSAFE_NOTICE_SOURCES": "sigterm"}))
    assert code == 0 and resumed["resumed_from"] == committed


def test_a_pod_killed_before_its_final_save_is_durable_has_its_loss_counted_on_restart(
    s3_uri: str, proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = trainer_past_a_checkpoint(s3_uri, proxy, monkeypatch, grace_s=4)
    proxy.chunk_delay_s = 1.0  # storage crawls: the final save cannot make the deadline
    proc.send_signal(signal.SIGTERM)
    time.sleep(4)
    proc.kill()  # the kubelet at the end of the grace period
    _, log = proc.communicate(timeout=30)
    stopped_at = int(re.search(r"final save at step (\d+)", log)[1])

    proxy.chunk_delay_s = 0.0
    code, resumed, log = result_of(trainer(s3_uri, {"SPOTSAFE_NOTICE_SOURCES": "sigterm"}))
    assert code == 0 and resumed["resumed_from"] < stopped_at
    lost = stopped_at - resumed["resumed_from"]
    assert f"stopped at step {stopped_at} but its final save never became durable" in log
    assert f"{lost} step(s) lost" in log
