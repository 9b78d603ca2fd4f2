"""Cloud metadata servers on loopback that announce preemptions the way the clouds do.

`AwsImds` serves the IMDSv2 session-token flow with `spot/instance-action` and
`events/recommendations/rebalance` (404 until announced). `GceMetadata` serves
`instance/preempted` ("FALSE" then "TRUE") with `wait_for_change` long polling. The drill gives
each emulated node its own server; tests aim the termination watcher at them.
"""

from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from spotsafe.local.servers import free_port

AWS_TOKEN_PATH = "/latest/api/token"
AWS_INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
GCE_PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
# IMDSv2 accepts token lifetimes from one second to six hours.
AWS_MAX_TOKEN_TTL_S = 21600


def iso_utc(epoch_s: float) -> str:
    """The clouds' timestamp form, e.g. 2026-11-29T18:00:00Z."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # A client that hung up mid-answer (a killed trainer) is normal here, not an error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Server:
    """A threaded HTTP server on a free loopback port, started and stopped with `with`."""

    handler: type[BaseHTTPRequestHandler]

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._httpd = _QuietHTTPServer(("127.0.0.1", free_port()), self.handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self.closed = False

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> _Server:
        self._thread.start()
        return self

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._lock.notify_all()  # release long polls
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        """Stay quiet: the drill's terminal is for progress, not access logs."""

    def reply(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class _AwsHandler(_Handler):
    def do_PUT(self) -> None:
        imds: AwsImds = self.server.owner
        if urlsplit(self.path).path != AWS_TOKEN_PATH:
            return self.reply(404)
        try:
            ttl = int(self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", ""))
        except ValueError:
            ttl = 0
        if not 1 <= ttl <= AWS_MAX_TOKEN_TTL_S:
            return self.reply(400)
        self.reply(200, imds.issue_token(ttl), {"X-aws-ec2-metadata-token-ttl-seconds": str(ttl)})

    def do_GET(self) -> None:
        imds: AwsImds = self.server.owner
        if not imds.token_valid(self.headers.get("X-aws-ec2-metadata-token")):
            return self.reply(401)
        body = imds.document(urlsplit(self.path).path)
        if body is None:
            return self.reply(404)
        self.reply(200, body)


class AwsImds(_Server):
    """IMDSv2 for one spot instance: tokens, then 404 until a notice is announced."""

    handler = _AwsHandler

    def __init__(self) -> None:
        super().__init__()
        self._tokens: dict[str, float] = {}
        self._instance_action: dict | None = None
        self._rebalance: dict | None = None
        self.requests = 0

    def issue_token(self, ttl_s: int) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = time.monotonic() + ttl_s
        return token

    def token_valid(self, token: str | None) -> bool:
        with self._lock:
            self.requests += 1
            return token is not None and self._tokens.get(token, 0.0) > time.monotonic()

    def document(self, path: str) -> str | None:
        with self._lock:
            found = {
                AWS_INSTANCE_ACTION_PATH: self._instance_action,
                AWS_REBALANCE_PATH: self._rebalance,
            }.get(path)
        return None if found is None else json.dumps(found)

    def announce_interruption(self, at_epoch_s: float, action: str = "terminate") -> None:
        """Publish the two-minute-style warning: the instance is reclaimed at `at_epoch_s`."""
        with self._lock:
            self._instance_action = {"action": action, "time": iso_utc(at_epoch_s)}

    def recommend_rebalance(self, noticed_epoch_s: float | None = None) -> None:
        with self._lock:
            self._rebalance = {"noticeTime": iso_utc(noticed_epoch_s or time.time())}

    def reset(self) -> None:
        """A fresh instance in the same slot: no notices."""
        with self._lock:
            self._instance_action = None
            self._rebalance = None


class _GceHandler(_Handler):
    def do_GET(self) -> None:
        gce: GceMetadata = self.server.owner
        parts = urlsplit(self.path)
        if self.headers.get("Metadata-Flavor") != "Google":
            return self.reply(403, "Missing Metadata-Flavor:Google header.")
        if parts.path != GCE_PREEMPTED_PATH:
            return self.reply(404)
        query = parse_qs(parts.query)
        wait = query.get("wait_for_change", ["false"])[0].lower() == "true"
        try:
            timeout_s = float(query.get("timeout_sec", ["0"])[0]) or None
        except ValueError:
            return self.reply(400, "timeout_sec must be a number of seconds")
        last_etag = query.get("last_etag", [None])[0]
        value, etag = gce.read(wait, last_etag, timeout_s)
        self.reply(200, value, {"ETag": etag, "Metadata-Flavor": "Google"})


class GceMetadata(_Server):
    """The GCE metadata server's `instance/preempted` for one preemptible VM."""

    handler = _GceHandler

    def __init__(self) -> None:
        super().__init__()
        self._preempted = False
        self._version = 0

    def _etag(self) -> str:
        return f"{self._version:016x}"

    def read(self, wait: bool, last_etag: str | None, timeout_s: float | None) -> tuple[str, str]:
        """The value and its ETag; with `wait`, block until it differs from `last_etag`."""
        with self._lock:
            if wait:
                # Without last_etag the server waits for the next change, as GCE does.
                seen = last_etag if last_etag is not None else self._etag()
                self._lock.wait_for(lambda: self._etag() != seen or self.closed, timeout_s)
            return ("TRUE" if self._preempted else "FALSE"), self._etag()

    def preempt(self) -> None:
        with self._lock:
            self._preempted = True
            self._version += 1
            self._lock.notify_all()

    def reset(self) -> None:
        with self._lock:
            self._preempted = False
            self._version += 1
            self._lock.notify_all()
