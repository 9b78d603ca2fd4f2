"""Exact resume: runs SIGKILLed at several moments, then restarted, end bitwise-identical to an
uninterrupted run. Real trainer processes, real signals, the real S3-API server behind a proxy
that slows transfers so a kill can land mid-upload."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable

from spotsafe_harness import INTERRUPTED_RUN, run_trainer, s3_keys, start_trainer


def _kill_when(moment: Callable[[], str | None], uri: str, env: dict[str, str]) -> str:
    """Start the trainer, SIGKILL it as soon as moment() names what it is doing."""
    proc = start_trainer(*INTERRUPTED_RUN, "--checkpoint-uri", uri, env=env)
    deadline = time.monotonic() + 60
    while not (hit := moment()):
        assert proc.poll() is None, f"the trainer exited before the kill: {proc.stderr.read()}"
        assert time.monotonic() < deadline, "the moment to kill never came"
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"the trainer ended before the kill at {hit}"
    return hit


def _request(proxy, pattern: str) -> Callable[[], str | None]:
    proxy.requests.clear()
    return lambda: next((r for r in list(proxy.requests) if re.search(pattern, r)), None)


def _committed(uri: str) -> Callable[[], str | None]:
    before = {k for k in s3_keys(uri) if k.endswith("manifest.json")}
    return lambda: next(
        (k for k in s3_keys(uri) if k.endswith("manifest.json") and k not in before), None
    )


def test_sigkill_at_several_moments_then_resume_is_bitwise_identical(
    s3_uri: str, proxy, uninterrupted: dict
) -> None:
    env = {"AWS_ENDPOINT_URL": proxy.url}
    proxy.chunk_delay_s = 0.02  # ~0.8 MB/s: a 98 kB state upload takes well over 100 ms

    _kill_when(_request(proxy, r"PUT .*/attempts/"), s3_uri, env)  # before any checkpoint
    upload = _kill_when(_request(proxy, r"PUT .*/state\.pt"), s3_uri, env)  # mid-upload
    step = int(re.search(r"step-(\d+)/", upload)[1])
    assert f"step-{step}/manifest.json" not in s3_keys(s3_uri), "the kill landed after commit"
    _kill_when(_committed(s3_uri), s3_uri, env)  # just after a commit
    _kill_when(_request(proxy, r"GET .*/state\.pt"), s3_uri, env)  # while restoring

    proxy.chunk_delay_s = 0.0
    rc, resumed, err = run_trainer(*INTERRUPTED_RUN, "--checkpoint-uri", s3_uri, env=env)
    assert rc == 0, err
    assert resumed["resumed_from"] is not None
    assert resumed["final_step"] == 60
    assert resumed["weights_sha256"] == uninterrupted["weights_sha256"]


def test_gcs_run_resumes_exactly(gcs_uri: str, uninterrupted: dict) -> None:
    half = [a if a != "60" else "27" for a in INTERRUPTED_RUN]
    rc, first, err = run_trainer(*half, "--checkpoint-uri", gcs_uri)
    assert rc == 0, err
    rc, resumed, err = run_trainer(*INTERRUPTED_RUN, "--checkpoint-uri", gcs_uri)
    assert rc == 0, err
    assert (first["final_step"], resumed["resumed_from"]) == (27, 27)
    assert resumed["weights_sha256"] == uninterrupted["weights_sha256"]
