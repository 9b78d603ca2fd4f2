"""The base of the tests' loopback fakes of JSON HTTP APIs (Google's APIs, the metadata server)."""

import json
from http.server import BaseHTTPRequestHandler


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that answers JSON and keeps the test's output free of access logs."""

    def log_message(self, *args) -> None:
        pass

    def send_json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
