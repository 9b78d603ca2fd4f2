"""A real Prometheus (the Debian package's server) on loopback, over a data directory and a
config file the test writes, or over series backfilled with `promtool tsdb create-blocks-from
openmetrics`; ready once its /-/ready answers."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from spotsafe.local.servers import free_port


def series(name: str, labels: dict[str, str], points: list[tuple[float, float]]) -> list[str]:
    """A series' samples as OpenMetrics lines: (unix seconds, value) points."""
    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return [f"{name}{{{text}}} {value} {t}" for t, value in points]


def openmetrics(families: list[tuple[str, str, list[str]]]) -> str:
    """The OpenMetrics text of (family name, type, sample lines) families."""
    lines = [
        line for name, kind, samples in families for line in (f"# TYPE {name} {kind}", *samples)
    ]
    return "\n".join([*lines, "# EOF"]) + "\n"


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


@contextmanager
def backfilled_prometheus(root: Path, openmetrics: str) -> Iterator[str]:
    """Serve Prometheus over the series of an OpenMetrics text (timestamps in seconds); yields
    its URL."""
    (root / "series.om").write_text(openmetrics)
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", "series.om", "data"],
        cwd=root,
        check=True,
        capture_output=True,
    )
    (root / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\n")
    with prometheus_server(root / "prometheus.yml", root / "data") as url:
        yield url
