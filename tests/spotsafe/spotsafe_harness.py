"""Test harness for the runtime: a real TCP proxy, trainer processes, direct bucket reads, the
rendezvous store of multi-node runs."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import boto3
from prometheus_client.parser import text_string_to_metric_families
from spotsafe.local.servers import LOCAL_AWS_ENV, free_port

TRAINER = [sys.executable, "-m", "spotsafe.examples.train"]
# The example trainer's run that the exact-resume and fault tests interrupt, then compare with
# the same run uninterrupted (conftest's `uninterrupted`, run once per session).
INTERRUPTED_RUN = ["--steps", "60", "--every-steps", "5", "--seed", "3"]
BIN = Path(sys.executable).parent  # spotsafe-run and python, as on the image's PATH
_REQUEST_LINE = re.compile(rb"(GET|PUT|POST|DELETE|HEAD) (\S+) HTTP/1")
_CRC32C_HEADER = re.compile(rb"(?i)x-amz-checksum-crc32c: (\S+)")


class TcpProxy:
    """A TCP proxy in front of a real server that a test can take down, slow down and watch.

    Down: open connections are cut and new ones closed at once, as when a storage endpoint
    becomes unreachable. Clearing ``flowing`` holds every transfer where it is. Every HTTP
    request line that passes is recorded. ``cut`` drops chosen requests (the client retries
    them); ``corrupt_next_body`` flips one byte of the next request body in transit.
    """

    def __init__(self, upstream_url: str) -> None:
        up = urlparse(upstream_url)
        self.upstream = (up.hostname, up.port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.up = True
        self.chunk_delay_s = 0.0
        self.flowing = threading.Event()  # cleared: traffic is held mid-stream
        self.flowing.set()
        self.requests: list[str] = []
        self.cut_requests: list[str] = []
        self.crc32c_headers: list[str] = []  # values of x-amz-checksum-crc32c sent
        self._cut_pattern, self._cuts_left = "", 0
        self._corrupt_pending = False
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._open |= {client, server}
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while self.up and (data := src.recv(16384)):
                if record:
                    lines = [(m[1] + b" " + m[2]).decode() for m in _REQUEST_LINE.finditer(data)]
                    with self._lock:
                        self.requests += lines
                        self.crc32c_headers += [v.decode() for v in _CRC32C_HEADER.findall(data)]
                        if self._cutting(lines):
                            break
                        data = self._maybe_corrupted(data, lines)
                time.sleep(self.chunk_delay_s)
                self.flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with self._lock:
                self._open.discard(s)
            s.close()

    def cut(self, pattern: str, times: int) -> None:
        """Drop the connection of the next `times` requests whose line matches pattern, before
        the server sees them: the client gets a reset connection and retries."""
        with self._lock:
            self._cut_pattern, self._cuts_left = pattern, times

    def _cutting(self, lines: list[str]) -> bool:
        hit = [line for line in lines if self._cuts_left and re.search(self._cut_pattern, line)]
        if hit:
            self._cuts_left -= 1
            self.cut_requests.append(hit[0])
        return bool(hit)

    def corrupt_next_body(self) -> None:
        """Flip one byte in the body of the next request that has a body of over 1 kB."""
        self._corrupt_pending = True

    def _maybe_corrupted(self, data: bytes, lines: list[str]) -> bytes:
        if not self._corrupt_pending or lines or len(data) < 1024:
            return data
        self._corrupt_pending = False
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]

    def down(self) -> None:
        self.up = False
        with self._lock:
            for s in self._open:
                s.shutdown(socket.SHUT_RDWR)

    def restore(self) -> None:
        self.up = True

    def close(self) -> None:
        self.flowing.set()
        self.down()
        self.listener.close()


def create_bucket(endpoint: str, name: str) -> str:
    """A bucket on the local S3-API server, made without touching the process's environment
    (for module-scoped fixtures, which cannot use monkeypatch)."""
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=LOCAL_AWS_ENV["AWS_DEFAULT_REGION"],
        aws_access_key_id=LOCAL_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )
    s3.create_bucket(Bucket=name)
    return name


def s3_keys(uri: str) -> list[str]:
    """Every key under an s3:// URI, relative to it, read straight from the server."""
    parsed = urlparse(uri)
    prefix = parsed.path.strip("/") + "/"
    listing = boto3.client("s3").list_objects_v2(Bucket=parsed.netloc, Prefix=prefix)
    return sorted(o["Key"][len(prefix) :] for o in listing.get("Contents", []))


def start_trainer(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [*TRAINER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def run_trainer(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict | None, str]:
    """Run the example trainer to the end: (exit code, its JSON result or None, stderr)."""
    proc = start_trainer(*args, env=env)
    out, err = proc.communicate(timeout=120)
    lines = out.strip().splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else None, err


def result_of(proc: subprocess.Popen) -> tuple[int, dict, str]:
    """Wait for a started trainer that must print its result: (exit code, result, stderr)."""
    out, err = proc.communicate(timeout=120)
    assert out.strip(), err
    return proc.returncode, json.loads(out.strip().splitlines()[-1]), err


def wait_for_step(
    port: int, step: int, proc: subprocess.Popen, metric: str = "spotsafe_training_step"
) -> float:
    """Wait until the process's metric reaches step; return the value it has then."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read()
        except OSError:
            time.sleep(0.05)
            continue
        for family in text_string_to_metric_families(text.decode()):
            if family.name == metric and family.samples[0].value >= step:
                return family.samples[0].value
        time.sleep(0.02)
    raise AssertionError(f"{metric} never reached {step}")


def start_ranks(
    script: str, *args: str, world: int = 2, env: dict[str, str] | None = None
) -> list[subprocess.Popen]:
    """Start a Python script on `world` gloo ranks (one process without a process group when
    world is 1), as torchrun would start them, their stdout and stderr piped."""
    env = {**os.environ, **(env or {})}
    if world > 1:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
    return [
        subprocess.Popen(
            [sys.executable, "-c", script, *args],
            env={**env, "RANK": str(rank)} if world > 1 else env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]


def run_ranks(
    script: str, *args: str, world: int = 2, env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess]:
    """Run a script on `world` ranks (start_ranks) to the end; each rank's exit code, stdout
    and stderr."""
    ranks = start_ranks(script, *args, world=world, env=env)
    outputs = [proc.communicate(timeout=180) for proc in ranks]
    return [
        subprocess.CompletedProcess(proc.args, proc.returncode, *output)
        for proc, output in zip(ranks, outputs, strict=True)
    ]


def with_bin_on_path() -> dict[str, str]:
    """This environment, with the image's commands (python, spotsafe-run) first on PATH."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


@dataclass
class RendezvousStore:
    """A team's rendezvous store, as a process on loopback."""

    endpoint: str
    proc: subprocess.Popen


def benchmark_summary(script: Path, trials: int, timeout: float) -> dict:
    """Run a benchmark's trials (fewer than its full run, whose figures the notes quote) and
    return the summary it prints as its last line; the benchmark itself must exit 0."""
    done = subprocess.run(
        [sys.executable, str(script), "--trials", str(trials)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
