"""Termination notices: every source becomes one `Notice` that carries a deadline.

Sources, chosen with SPOTSAFE_NOTICE_SOURCES (comma list, default "sigterm"):
- ``sigterm``: pod deletion, node drain, GKE graceful shutdown. The deadline is the configured
  grace (SPOTSAFE_SIGTERM_GRACE_S, default 30 s, the Kubernetes default) less the drain's lag
  (SPOTSAFE_SIGTERM_LAG_S, default 0): when a drain follows the cloud's notice through a queue
  (AWS: EventBridge, SQS, the provisioner), SIGTERM arrives that much after the notice, but the
  instance still goes at the notice's time.
- ``aws``: IMDSv2 with a session token; ``spot/instance-action`` (deadline: the notice's time) and
  ``events/recommendations/rebalance`` (an early warning, no deadline), polled every
  SPOTSAFE_IMDS_POLL_S seconds (at most 5). Endpoint: AWS_EC2_METADATA_SERVICE_ENDPOINT.
- ``gce``: ``instance/preempted`` read with ``wait_for_change``; the deadline is
  SPOTSAFE_GCE_NOTICE_S after it turns TRUE (default 30 s, a plain VM's notice; GKE's Job
  templates set what the Spot pool's shutdown grace leaves the pod, 15 s to 120 s). Host:
  GCE_METADATA_HOST, as Google's libraries read it.

A notice source that cannot be reached (IMDS behind a hop limit of 1, no metadata server) is a
warning when it first fails and when it answers again, and the gauge
``spotsafe_notice_source_reachable{source}`` says which sources are watched blind.

Signal handlers and poller threads only append to a queue; `poll()` in the training loop turns
what arrived into notices, logs them and counts them, so nothing takes a lock inside a handler.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime

from spotsafe import metrics
from spotsafe.errors import EXIT_USAGE, ConfigError

log = logging.getLogger(__name__)

PREEMPTION = "preemption"
REBALANCE = "rebalance"
SOURCES = ("sigterm", "aws", "gce")
AWS_DEFAULT_ENDPOINT = "http://169.254.169.254"
GCE_DEFAULT_HOST = "metadata.google.internal"
# AWS asks for a check every 5 s: the two-minute warning must not lose more than that.
AWS_MAX_POLL_S = 5.0
_AWS_TOKEN_TTL_S = 21600
_AWS_ACTIONS = ("terminate", "stop", "hibernate")
_AWS_NOTICE_S = 120.0
_HTTP_TIMEOUT_S = 2.0
# A pod reaches IMDSv2 only if the instance's PUT response hop limit counts its network hop.
_AWS_UNREACHABLE_HINT = (
    "; from a pod, IMDSv2 needs an instance metadata hop limit of 2 (the platform keeps 1 and "
    "watches SIGTERM alone)"
)
# A GCE long poll is re-armed this often so a dead connection is noticed.
_GCE_WAIT_S = 60


@dataclass(frozen=True)
class Notice:
    """One termination notice. `deadline` is epoch seconds; None for a rebalance warning."""

    source: str
    kind: str
    received_at: float
    deadline: float | None

    def seconds_left(self, now: float | None = None) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline - (time.time() if now is None else now)


@dataclass(frozen=True)
class WatcherConfig:
    """Which notice sources to watch and where; `from_env` reads the documented variables."""

    sources: tuple[str, ...] = ("sigterm",)
    sigterm_grace_s: float = 30.0
    """Seconds between SIGTERM and SIGKILL; match the pod's terminationGracePeriodSeconds."""
    sigterm_lag_s: float = 0.0
    """How long after the cloud's notice SIGTERM may arrive (the drain's queue lag): the
    instance goes at the notice's time, so the SIGTERM deadline is the grace less this lag."""
    aws_endpoint: str = AWS_DEFAULT_ENDPOINT
    aws_poll_s: float = AWS_MAX_POLL_S
    gce_host: str = GCE_DEFAULT_HOST
    gce_notice_s: float = 30.0
    """Seconds from GCE's preemption notice to the kill: 30 s for a plain VM; on GKE what the
    Spot pool's shutdown grace leaves a training pod."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.sources) - set(SOURCES))
        if unknown:
            raise ConfigError(
                f"unknown notice source(s) {', '.join(unknown)}; choose from {', '.join(SOURCES)}"
            )
        if not 0 < self.aws_poll_s <= AWS_MAX_POLL_S:
            raise ConfigError(f"IMDS poll interval must be in (0, {AWS_MAX_POLL_S:g}] s")
        if self.sigterm_grace_s <= 0 or self.gce_notice_s <= 0:
            raise ConfigError("notice budgets must be positive seconds")
        if not 0 <= self.sigterm_lag_s < self.sigterm_grace_s:
            raise ConfigError(
                f"SPOTSAFE_SIGTERM_LAG_S must be in [0, {self.sigterm_grace_s:g}) s "
                "(below SPOTSAFE_SIGTERM_GRACE_S)"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> WatcherConfig:
        def seconds(name: str, default: float) -> float:
            raw = environ.get(name)
            try:
                return default if raw in (None, "") else float(raw)
            except ValueError:
                raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None

        raw_sources = environ.get("SPOTSAFE_NOTICE_SOURCES", "sigterm")
        return cls(
            sources=tuple(s.strip() for s in raw_sources.split(",") if s.strip()),
            sigterm_grace_s=seconds("SPOTSAFE_SIGTERM_GRACE_S", cls.sigterm_grace_s),
            sigterm_lag_s=seconds("SPOTSAFE_SIGTERM_LAG_S", cls.sigterm_lag_s),
            aws_endpoint=environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or AWS_DEFAULT_ENDPOINT,
            aws_poll_s=seconds("SPOTSAFE_IMDS_POLL_S", AWS_MAX_POLL_S),
            gce_host=environ.get("GCE_METADATA_HOST") or GCE_DEFAULT_HOST,
            gce_notice_s=seconds("SPOTSAFE_GCE_NOTICE_S", cls.gce_notice_s),
        )


def parse_cloud_time(text: str) -> float:
    """Epoch seconds from the clouds' UTC timestamps, e.g. 2026-11-29T18:00:00Z."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class TerminationWatcher:
    """Watches the configured sources; the training loop calls `poll()` at each step boundary."""

    config: WatcherConfig = field(default_factory=WatcherConfig)
    preemption: Notice | None = field(default=None, init=False)
    _inbox: collections.deque = field(default_factory=collections.deque, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _previous_handler: object = field(default=None, init=False)

    def start(self) -> TerminationWatcher:
        if "sigterm" in self.config.sources:
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
            metrics.sigterm_lag.set(self.config.sigterm_lag_s)
        pollers = {"aws": self._poll_aws, "gce": self._watch_gce}
        for source in self.config.sources:
            if source in pollers:
                thread = threading.Thread(target=pollers[source], name=f"notice-{source}")
                thread.daemon = True  # a blocked long poll must never hold the exit
                thread.start()
        return self

    def close(self, sigterm_handler: object = None) -> None:
        """Stop watching; SIGTERM goes back to the handler it had, or to `sigterm_handler`
        (swapped in one call, so no SIGTERM ever meets the default action in between)."""
        self._stop.set()
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, sigterm_handler or self._previous_handler)
            self._previous_handler = None

    def __enter__(self) -> TerminationWatcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def poll(self) -> list[Notice]:
        """Notices that arrived since the last call, logged and counted; never blocks."""
        arrived = []
        while self._inbox:
            notice = self._inbox.popleft()
            arrived.append(notice)
            metrics.notices.labels(source=notice.source, kind=notice.kind).inc()
            left = notice.seconds_left()
            log.warning(
                "termination notice from %s: %s%s",
                notice.source,
                notice.kind,
                "" if left is None else f", {left:.1f} s left",
            )
            if notice.kind == PREEMPTION and (
                self.preemption is None or notice.deadline < self.preemption.deadline
            ):
                self.preemption = notice
        return arrived

    def _post(self, source: str, kind: str, deadline: float | None) -> None:
        self._inbox.append(Notice(source, kind, time.time(), deadline))

    def _on_sigterm(self, signum, frame) -> None:
        left = self.config.sigterm_grace_s - self.config.sigterm_lag_s
        self._post("sigterm", PREEMPTION, time.time() + left)

    def _poll_aws(self) -> None:
        imds = _Imds(self.config.aws_endpoint)
        reach = _Reachability("aws", f"IMDS at {self.config.aws_endpoint}", _AWS_UNREACHABLE_HINT)
        rebalance_seen = False
        while not self._stop.is_set():
            try:
                action = imds.get_json("/latest/meta-data/spot/instance-action")
                reach.answered()
                if action is not None and action.get("action") in _AWS_ACTIONS:
                    self._post("aws", PREEMPTION, _aws_deadline(action))
                    return
                if not rebalance_seen:
                    rebalance = imds.get_json("/latest/meta-data/events/recommendations/rebalance")
                    if rebalance is not None:
                        rebalance_seen = True
                        self._post("aws", REBALANCE, None)
            except (OSError, ValueError, KeyError) as exc:
                reach.failed(exc)
            self._stop.wait(self.config.aws_poll_s)

    def _watch_gce(self) -> None:
        base = self.config.gce_host
        url = f"{base if '://' in base else 'http://' + base}/computeMetadata/v1/instance/preempted"
        reach = _Reachability("gce", f"GCE metadata at {url}", "")
        etag = None
        while not self._stop.is_set():
            query = "" if etag is None else f"?wait_for_change=true&last_etag={etag}"
            if etag is not None:
                query += f"&timeout_sec={_GCE_WAIT_S}"
            request = urllib.request.Request(url + query, headers={"Metadata-Flavor": "Google"})
            try:
                with urllib.request.urlopen(request, timeout=_GCE_WAIT_S + 5) as response:
                    value = response.read().decode().strip()
                    etag = response.headers.get("ETag", etag)
            except OSError as exc:
                reach.failed(exc)
                self._stop.wait(1.0)
                continue
            reach.answered()
            if value == "TRUE":
                self._post("gce", PREEMPTION, time.time() + self.config.gce_notice_s)
                return


class _Reachability:
    """Whether a notice source answers: a warning on each change, and a gauge for alerts."""

    def __init__(self, source: str, what: str, hint: str) -> None:
        self.source, self.what, self.hint = source, what, hint
        self.reachable: bool | None = None
        self._gauge = metrics.notice_source_reachable.labels(source=source)

    def answered(self) -> None:
        if self.reachable is False:
            log.warning("notice source %s: %s answers again", self.source, self.what)
        self.reachable = True
        self._gauge.set(1)

    def failed(self, exc: Exception) -> None:
        if self.reachable is not False:
            log.warning(
                "notice source %s: %s cannot be reached (%s); its notices will be missed "
                "until it answers%s",
                self.source,
                self.what,
                exc,
                self.hint,
            )
        self.reachable = False
        self._gauge.set(0)


def _aws_deadline(action: dict) -> float:
    """The notice's time; an unreadable one must not hide the notice, so take the two minutes
    EC2 promises from now."""
    try:
        return parse_cloud_time(action["time"])
    except (KeyError, TypeError, ValueError):
        log.warning("instance-action without a readable time: %s", action)
        return time.time() + _AWS_NOTICE_S


class _Imds:
    """An IMDSv2 session: a PUT for the token, then GETs that carry it."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._token: str | None = None
        self._expires = 0.0

    def _refresh_token(self) -> None:
        request = urllib.request.Request(
            f"{self.endpoint}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(_AWS_TOKEN_TTL_S)},
        )
        with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_S) as response:
            self._token = response.read().decode()
        self._expires = time.monotonic() + _AWS_TOKEN_TTL_S - 60

    def get_json(self, path: str) -> dict | None:
        """The document at `path`, or None while it is absent (404)."""
        for attempt in range(2):
            if self._token is None or time.monotonic() > self._expires:
                self._refresh_token()
            request = urllib.request.Request(
                self.endpoint + path, headers={"X-aws-ec2-metadata-token": self._token}
            )
            try:
                with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT_S) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                if exc.code == 401 and attempt == 0:
                    self._token = None  # expired or revoked: one fresh token, then give up
                    continue
                raise
        return None


def main(argv: list[str] | None = None) -> int:
    """Print each termination notice as a JSON line; exit 0 once a preemption is announced."""
    parser = argparse.ArgumentParser(
        prog="python -m spotsafe.termination", description=main.__doc__
    )
    parser.add_argument("--timeout", type=float, default=None, help="give up after this many s")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = WatcherConfig.from_env()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    end = None if args.timeout is None else time.monotonic() + args.timeout
    with TerminationWatcher(config) as watcher:
        print(json.dumps({"watching": list(config.sources)}), flush=True)
        while end is None or time.monotonic() < end:
            for notice in watcher.poll():
                print(json.dumps(asdict(notice)), flush=True)
            if watcher.preemption is not None:
                return 0
            time.sleep(0.05)
    return 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
