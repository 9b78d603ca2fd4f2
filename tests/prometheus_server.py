"""A real Prometheus (the Debian package's server) on loopback, over a data directory and a
config file the test writes; ready once its /-/ready answers."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from spotsafe.local.servers import free_port


@contextmanager
def prometheus_server(config: Path, data: Path) -> Iterator[str]:
    """Serve Prometheus with `config` over `data`; yields its URL."""
    port = free_port()
    server = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if requests.get(f"{url}/-/ready", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
