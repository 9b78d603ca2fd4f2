"""A seeded fault-injecting HTTP proxy on loopback, in front of the local S3-API or GCS server.

It reads each request whole, forwards it on a fresh upstream connection and relays the answer,
unless a fault is drawn for it. A generator seeded by the test draws, for every request, whether
it fails (with probability ``rate``) and how:

- ``error_before``: a 500 or 503 in the service's own error format; the server never sees it;
- ``error_after``: the same, in place of the server's answer, after the server acted;
- ``reset_mid_body``: the connection reset halfway through the request's body (the server never
  sees it) or else the response's body (after the server acted); with no body on either side it
  is a dropped answer, and counted as one;
- ``cut_in_headers``: the server's answer ends, cleanly, somewhere after its status line and
  before the end of its headers (HTTP clients take what came as the whole header block);
- ``delay``: 2-5 s before the request goes on;
- ``drop_answer``: the connection closed without an answer after the server acted.

``inject`` aims one kind at the next requests matching a pattern instead. Every answer the server
gave is recorded in ``exchanges``, in order, so a test can see what the server actually did.
"""

from __future__ import annotations

import http.client
import json
import random
import re
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlparse

FAULT_KINDS = (
    "error_before",
    "error_after",
    "reset_mid_body",
    "cut_in_headers",
    "delay",
    "drop_answer",
)
DELAY_S = (2.0, 5.0)
# The error documents the services return: S3's error XML (InternalError, SlowDown; Amazon S3 API
# Reference, "Error responses") and the GCS JSON API's error object (cloud.google.com/storage/
# docs/json_api/v1/status-codes).
_S3_ERRORS = {
    500: ("InternalError", "We encountered an internal error. Please try again."),
    503: ("SlowDown", "Please reduce your request rate."),
}
_GCS_ERRORS = {500: "backendError", 503: "backendError"}
# Framing and connection headers: the proxy sets its own on each side.
_NOT_RELAYED = {"connection", "keep-alive", "transfer-encoding", "expect", "content-length"}


@dataclass(frozen=True)
class Exchange:
    """A request the server answered: what it was and what the server said."""

    method: str
    target: str
    status: int
    body: bytes  # the server's answer, when it is a small document (else empty)


@dataclass
class _Request:
    method: str
    target: str
    headers: list[tuple[str, str]]
    length: int | None  # None: chunked
    expects_continue: bool

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)


class FaultProxy:
    def __init__(
        self,
        upstream_url: str,
        service: str,
        seed: int = 0,
        rate: float = 0.0,
        kinds: tuple[str, ...] = FAULT_KINDS,
    ) -> None:
        if service not in ("s3", "gcs"):
            raise ValueError(f"service must be s3 or gcs, not {service!r}")
        up = urlparse(upstream_url)
        self.upstream = (up.hostname, up.port)
        self.service = service
        self.rate = rate
        self.kinds = kinds
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self.exchanges: list[Exchange] = []
        self._rng = random.Random(seed)
        self._aimed: list[list] = []  # [kind, compiled pattern, times left, to spare first]
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def inject(self, kind: str, pattern: str, times: int = 1, after: int = 0) -> None:
        """Inflict `kind` on `times` requests whose 'METHOD target' matches pattern, once
        `after` such requests have passed unharmed."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        with self._lock:
            self._aimed.append([kind, re.compile(pattern), times, after])

    def close(self) -> None:
        self._listener.close()

    # ---- serving ------------------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        try:
            while (request := _read_head(reader)) is not None:
                if not self._exchange(client, reader, request):
                    break
        except (OSError, ValueError):
            pass  # the client went away, or spoke something this proxy does not relay
        finally:
            reader.close()
            client.close()

    def _draw(self, request: _Request) -> str | None:
        line = f"{request.method} {request.target}"
        with self._lock:
            self.requests += 1
            for aimed in self._aimed:
                kind, pattern, left, spared = aimed
                if left and pattern.search(line):
                    if spared:
                        aimed[3] -= 1
                        continue
                    aimed[2] -= 1
                    return kind
            if self._rng.random() < self.rate:
                return self._rng.choice(self.kinds)
            return None

    def _random(self) -> float:
        with self._lock:
            return self._rng.random()

    def _count(self, kind: str) -> None:
        with self._lock:
            self.injected[kind] += 1

    def _exchange(self, client: socket.socket, reader, request: _Request) -> bool:
        """Serve one request; False when the client connection is to be dropped."""
        kind = self._draw(request)
        if request.expects_continue:
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if kind == "reset_mid_body" and request.length and request.length > 1:
            reader.read(request.length // 2)
            self._count(kind)
            _reset(client)
            return False
        body = _read_body(reader, request.length)
        if kind == "error_before":
            self._count(kind)
            client.sendall(self._error(request.method))
            return True
        if kind == "delay":
            self._count(kind)
            time.sleep(DELAY_S[0] + (DELAY_S[1] - DELAY_S[0]) * self._random())
        status, reason, headers, answer = self._forward(request, body)
        length = len(answer)
        if request.method == "HEAD":  # no body; its Content-Length is the object's
            length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
        head = _head(status, reason, headers, length)
        if kind == "error_after":
            self._count(kind)
            client.sendall(self._error(request.method))
        elif kind == "cut_in_headers":
            self._count(kind)
            start = head.index(b"\r\n") + 2
            client.sendall(head[: start + int(self._random() * (len(head) - 4 - start))])
            client.shutdown(socket.SHUT_RDWR)
            return False
        elif kind == "reset_mid_body" and len(answer) > 1:
            self._count(kind)
            client.sendall(head + answer[: len(answer) // 2])
            _reset(client)
            return False
        elif kind in ("drop_answer", "reset_mid_body"):  # no body on either side to cut
            self._count("drop_answer")
            client.shutdown(socket.SHUT_RDWR)
            return False
        else:
            client.sendall(head + answer)
        return (request.header("connection") or "").lower() != "close"

    def _forward(self, request: _Request, body: bytes) -> tuple[int, str, list, bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            conn.putrequest(
                request.method, request.target, skip_host=True, skip_accept_encoding=True
            )
            for name, value in request.headers:
                if name.lower() not in _NOT_RELAYED:
                    conn.putheader(name, value)
            if body or request.length is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            answer = response.read()
            headers = response.getheaders()
        finally:
            conn.close()
        small = answer if len(answer) < 65536 else b""
        with self._lock:
            self.exchanges.append(Exchange(request.method, request.target, response.status, small))
        return response.status, response.reason, headers, answer

    def _error(self, method: str) -> bytes:
        status = 500 if self._random() < 0.5 else 503
        if self.service == "s3":
            code, message = _S3_ERRORS[status]
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
            ).encode()
            kind = "application/xml"
        else:
            reason = _GCS_ERRORS[status]
            error = {"code": status, "message": reason, "errors": [{"reason": reason}]}
            body, kind = json.dumps({"error": error}).encode(), "application/json"
        head = _head(status, http.client.responses[status], [("Content-Type", kind)], len(body))
        return head if method == "HEAD" else head + body


def _read_head(reader) -> _Request | None:
    line = reader.readline(65537)
    if not line:
        return None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    headers = []
    while (raw := reader.readline(65537)) not in (b"\r\n", b"\n", b""):
        name, _, value = raw.decode("latin-1").partition(":")
        headers.append((name.strip(), value.strip()))
    request = _Request(method, target, headers, 0, False)
    if (request.header("transfer-encoding") or "").lower() == "chunked":
        request.length = None
    else:
        request.length = int(request.header("content-length") or 0)
    request.expects_continue = (request.header("expect") or "").lower() == "100-continue"
    return request


def _read_body(reader, length: int | None) -> bytes:
    if length is not None:
        return reader.read(length)
    chunks = []
    while size := int(reader.readline().split(b";")[0], 16):
        chunks.append(reader.read(size))
        reader.readline()
    while reader.readline() not in (b"\r\n", b"\n", b""):  # trailers
        pass
    return b"".join(chunks)


def _head(status: int, reason: str, headers: list[tuple[str, str]], length: int) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines += [f"{k}: {v}" for k, v in headers if k.lower() not in _NOT_RELAYED]
    lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, not a FIN: the peer sees ECONNRESET."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
