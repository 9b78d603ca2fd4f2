"""The termination watcher, end to end: real processes, real signals, real metadata servers."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import REGISTRY
from spotsafe.local.metadata import AwsImds, GceMetadata, iso_utc
from spotsafe.local.servers import free_port
from spotsafe.termination import TerminationWatcher, WatcherConfig, parse_cloud_time


def start_probe(env: dict[str, str]) -> subprocess.Popen:
    """`python -m spotsafe.termination` with the given settings, once it is watching."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "spotsafe.termination", "--timeout", "30"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert "watching" in json.loads(proc.stdout.readline())
    return proc


def next_notice(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return json.loads(line)


def test_sigterm_becomes_a_preemption_with_the_configured_grace() -> None:
    proc = start_probe({"SPOTSAFE_NOTICE_SOURCES": "sigterm", "SPOTSAFE_SIGTERM_GRACE_S": "7"})
    time.sleep(0.3)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    notice = next_notice(proc)
    assert proc.wait(timeout=10) == 0
    assert (notice["source"], notice["kind"]) == ("sigterm", "preemption")
    assert notice["deadline"] - notice["received_at"] == pytest.approx(7, abs=0.05)


def test_sigterm_deadline_subtracts_the_drain_lag() -> None:
    """A drain reaches the pod `lag` seconds after the cloud's notice; the instance still goes at
    the notice's time, so the runtime plans its final save for grace - lag."""
    with TerminationWatcher(WatcherConfig(sigterm_grace_s=120, sigterm_lag_s=30)):
        # The alert on the measured lag compares against what running pods allow for.
        assert REGISTRY.get_sample_value("spotsafe_notice_sigterm_lag_seconds") == 30
    proc = start_probe(
        {
            "SPOTSAFE_NOTICE_SOURCES": "sigterm",
            "SPOTSAFE_SIGTERM_GRACE_S": "120",
            "SPOTSAFE_SIGTERM_LAG_S": "30",
        }
    )
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    notice = next_notice(proc)
    assert proc.wait(timeout=10) == 0
    assert notice["deadline"] - notice["received_at"] == pytest.approx(90, abs=0.05)


def reachable(source: str) -> float | None:
    return REGISTRY.get_sample_value("spotsafe_notice_source_reachable", {"source": source})


def wait_for(predicate, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_unreachable_imds_is_one_warning_and_a_metric_and_sigterm_still_works(caplog) -> None:
    """As from a pod behind a hop limit of 1: nothing answers at the IMDS address."""
    caplog.set_level(logging.WARNING, logger="spotsafe.termination")
    config = WatcherConfig(
        sources=("sigterm", "aws"),
        sigterm_grace_s=10,
        aws_endpoint=f"http://127.0.0.1:{free_port()}",
        aws_poll_s=0.1,
    )
    with TerminationWatcher(config) as watcher:
        assert wait_for(lambda: reachable("aws") == 0)
        time.sleep(0.5)  # several more failed polls
        warnings = [r.getMessage() for r in caplog.records if "cannot be reached" in r.message]
        assert len(warnings) == 1, "a warning per outage, not per poll"
        assert "notice source aws" in warnings[0] and "hop limit of 2" in warnings[0]
        os.kill(os.getpid(), signal.SIGTERM)
        assert wait_for(lambda: bool(watcher.poll()) or watcher.preemption is not None)
        assert watcher.preemption.source == "sigterm"


def test_imds_that_stops_answering_turns_the_metric_to_zero(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="spotsafe.termination")
    imds = AwsImds().start()
    config = WatcherConfig(sources=("aws",), aws_endpoint=imds.url, aws_poll_s=0.1)
    with TerminationWatcher(config):
        assert wait_for(lambda: reachable("aws") == 1)
        assert not any("cannot be reached" in r.message for r in caplog.records)
        imds.close()
        assert wait_for(lambda: reachable("aws") == 0)
    assert any("cannot be reached" in r.message for r in caplog.records)


def test_aws_imds_rebalance_then_instance_action_with_the_notice_time_as_deadline() -> None:
    with AwsImds() as imds:
        proc = start_probe(
            {
                "SPOTSAFE_NOTICE_SOURCES": "aws",
                "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url,
                "SPOTSAFE_IMDS_POLL_S": "0.2",
            }
        )
        time.sleep(1.0)
        assert proc.poll() is None, "a 404 before the notice is no notice"
        assert imds.requests >= 4, "the watcher polls with a session token"

        imds.recommend_rebalance()
        rebalance = next_notice(proc)
        assert (rebalance["source"], rebalance["kind"], rebalance["deadline"]) == (
            "aws",
            "rebalance",
            None,
        )
        assert proc.poll() is None, "a rebalance recommendation does not stop the job"

        reclaim_at = int(time.time()) + 120
        imds.announce_interruption(reclaim_at)
        notice = next_notice(proc)
        assert proc.wait(timeout=10) == 0
    assert (notice["source"], notice["kind"]) == ("aws", "preemption")
    assert notice["deadline"] == reclaim_at


@pytest.mark.parametrize("notice_s", [15, 30, 120])
def test_gce_preempted_long_poll_gives_the_pools_grace(notice_s) -> None:
    """The Job template sets SPOTSAFE_GCE_NOTICE_S to what the Spot pool's shutdown grace leaves
    the pod (GKE: 15 s by default, up to 120 s)."""
    with GceMetadata() as gce:
        proc = start_probe(
            {
                "SPOTSAFE_NOTICE_SOURCES": "gce",
                "GCE_METADATA_HOST": gce.url.removeprefix("http://"),
                "SPOTSAFE_GCE_NOTICE_S": str(notice_s),
            }
        )
        time.sleep(0.5)
        assert proc.poll() is None, "FALSE is no notice"
        preempted_at = time.time()
        gce.preempt()
        notice = next_notice(proc)
        assert proc.wait(timeout=10) == 0
    assert (notice["source"], notice["kind"]) == ("gce", "preemption")
    assert notice["received_at"] - preempted_at < 1.0, "wait_for_change answers at once"
    assert notice["deadline"] - notice["received_at"] == pytest.approx(notice_s, abs=0.05)


def test_earliest_deadline_wins_across_sources() -> None:
    with AwsImds() as imds:
        imds.announce_interruption(time.time() + 120)
        config = WatcherConfig(
            sources=("sigterm", "aws"), sigterm_grace_s=10, aws_endpoint=imds.url, aws_poll_s=0.1
        )
        with TerminationWatcher(config) as watcher:
            deadline = time.monotonic() + 5
            while watcher.preemption is None and time.monotonic() < deadline:
                watcher.poll()
                time.sleep(0.05)
            assert watcher.preemption.source == "aws"
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            watcher.poll()
            assert watcher.preemption.source == "sigterm"
            assert watcher.preemption.seconds_left() == pytest.approx(10, abs=0.5)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "close() restores the handler"


def test_imds_emulator_speaks_imdsv2() -> None:
    with AwsImds() as imds:
        action = f"{imds.url}/latest/meta-data/spot/instance-action"
        with pytest.raises(urllib.error.HTTPError) as unauthorised:
            urllib.request.urlopen(action, timeout=2)
        assert unauthorised.value.code == 401
        put = urllib.request.Request(f"{imds.url}/latest/api/token", method="PUT")
        with pytest.raises(urllib.error.HTTPError) as no_ttl:
            urllib.request.urlopen(put, timeout=2)
        assert no_ttl.value.code == 400
        put.add_header("X-aws-ec2-metadata-token-ttl-seconds", "60")
        token = urllib.request.urlopen(put, timeout=2).read().decode()
        get = urllib.request.Request(action, headers={"X-aws-ec2-metadata-token": token})
        with pytest.raises(urllib.error.HTTPError) as before:
            urllib.request.urlopen(get, timeout=2)
        assert before.value.code == 404
        imds.announce_interruption(1_800_000_000)
        body = json.loads(urllib.request.urlopen(get, timeout=2).read())
    assert body == {"action": "terminate", "time": "2027-01-15T08:00:00Z"}
    assert parse_cloud_time(iso_utc(1_800_000_000)) == 1_800_000_000


def test_gce_emulator_requires_the_flavor_header() -> None:
    with GceMetadata() as gce:
        url = f"{gce.url}/computeMetadata/v1/instance/preempted"
        with pytest.raises(urllib.error.HTTPError) as forbidden:
            urllib.request.urlopen(url, timeout=2)
        assert forbidden.value.code == 403
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        assert urllib.request.urlopen(request, timeout=2).read() == b"FALSE"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SPOTSAFE_NOTICE_SOURCES": "sigterm,azure"}, "unknown notice source(s) azure"),
        ({"SPOTSAFE_IMDS_POLL_S": "30"}, "poll interval must be in (0, 5]"),
        ({"SPOTSAFE_SIGTERM_GRACE_S": "soon"}, "SPOTSAFE_SIGTERM_GRACE_S must be a number"),
        (
            {"SPOTSAFE_SIGTERM_GRACE_S": "30", "SPOTSAFE_SIGTERM_LAG_S": "30"},
            "SPOTSAFE_SIGTERM_LAG_S must be in [0, 30) s",
        ),
    ],
)
def test_bad_settings_are_named_without_a_traceback(env: dict[str, str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spotsafe.termination", "--timeout", "1"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
