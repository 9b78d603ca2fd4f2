"""An HTTP reverse proxy on loopback that records every exchange and may answer a request itself
instead of forwarding it: the base of the permission layer in front of fake-gcs-server, and, with
no answers of its own, the recorder in front of moto's S3 API.

Requests go upstream byte for byte with their own Host header, so signed requests (SigV4) still
verify there.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

# Headers that belong to one connection, not to the request (RFC 9110, 7.6.1).
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "expect"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # as sent: percent-encoded, with its query
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Exchange:
    """One request as a client made it, as an identity, and how it was answered."""

    identity: str
    method: str
    path: str
    status: int
    body: str  # of an answer >= 400: what the service said

    def __str__(self) -> str:
        return f"{self.method} {self.path} -> {self.status} {self.body}".rstrip()


class RecordingProxy:
    """Forwards to `upstream`; `listen(identity)` opens a port on which requests are taken as
    made by that identity. Subclasses override `answer` to reply without forwarding."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlparse(upstream)
        self.exchanges: list[Exchange] = []
        self.endpoints: dict[str, str] = {}  # identity -> its URL
        self._servers: list[ThreadingHTTPServer] = []
        self._lock = threading.Lock()

    def answer(self, identity: str, request: Request) -> Response | None:
        """A reply of the proxy's own, or None to forward the request."""
        return None

    def forwarded(self, identity: str, request: Request, response: Response) -> Response:
        """The upstream's response as the client gets it."""
        return response

    def forward(self, request: Request) -> Response:
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port)
        try:
            connection.putrequest(
                request.method, request.path, skip_host=True, skip_accept_encoding=True
            )
            for name, value in request.headers.items():
                if name not in HOP_BY_HOP and name != "content-length":
                    connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(request.body)))
            connection.endheaders(request.body)
            reply = connection.getresponse()
            headers = {k.lower(): v for k, v in reply.getheaders()}
            return Response(reply.status, headers, reply.read())
        finally:
            connection.close()

    def record(self, identity: str, request: Request, response: Response) -> None:
        said = response.body[:400].decode(errors="replace") if response.status >= 400 else ""
        exchange = Exchange(identity, request.method, request.path, response.status, said)
        with self._lock:
            self.exchanges.append(exchange)

    def listen(self, identity: str) -> str:
        """A loopback endpoint whose requests are `identity`'s; returns its URL."""
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue answered here

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(
                    self.command,
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                )
                response = proxy.answer(identity, request)
                if response is None:
                    try:
                        response = proxy.forwarded(identity, request, proxy.forward(request))
                    except OSError as e:  # the server hung up: a gateway's 502, recorded
                        response = Response(502, {}, f"{type(e).__name__}: {e}".encode())
                proxy.record(identity, request, response)
                self.send_response(response.status)
                for name, value in response.headers.items():
                    if name not in HOP_BY_HOP and name != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(response.body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle

            def log_message(self, format: str, *args: object) -> None:
                pass  # the exchanges are the log

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._servers.append(server)
        self.endpoints[identity] = f"http://127.0.0.1:{server.server_address[1]}"
        return self.endpoints[identity]

    def of(self, identity: str) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.identity == identity]

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
