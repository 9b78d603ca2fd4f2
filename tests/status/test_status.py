"""`spotctl status` against a real Prometheus that scraped a real run.

The run: the example trainer (real PyTorch on CPU, checkpoints in a local store), three attempts
as the Job controller makes them, each a pod with its own metrics endpoint: the first stopped by
a notice (SIGTERM: final save, exit 75), the second killed with no notice after training past its
last checkpoint, the third resumed and trained to the end. Prometheus (the Debian package's
server, on loopback) scrapes them every second as the stack's PodMonitor does (namespace, pod
and run labels on every series), evaluates the stack's rules (components/k8s: the price
recordings from the stack's config and the rules file), and scrapes a kube-state-metrics stand-in
that places the pods (two spot nodes, then an on-demand one) as kube-state-metrics reports them.

What status reports is compared with the ledger the series came from: each attempt's own
(spotsafe.goodput.Ledger: the trainer's JSON line at exit, or its metrics read just before the
kill) and the run's progress record in the checkpoint store.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_server import backfilled_prometheus, openmetrics, prometheus_server, series
from spotsafe import goodput
from spotsafe.local.servers import free_port
from spotsafe.preemption import EXIT_PREEMPTED
from stack_files import stack_values
from typer.testing import CliRunner

from components.config import load_config
from components.k8s import prices
from components.k8s.alerts import alert_groups
from spotctl.cli import app
from spotctl.drill.jobs import JobSpec
from spotctl.status import runs
from spotctl.status.runs import RUN_CAUSES

SETTINGS = load_config(stack_values("prod"))
GPU_CLASS = SETTINGS.gpu_classes[0].name
PRICES = SETTINGS.kubernetes.monitoring.prices_of(GPU_CLASS)
NAMESPACE, RUN = "vision", "llama"
# Long enough that each attempt trains over several scrapes on an idle machine (the small model
# trains about 1,500 steps a second there).
STEPS, EVERY = 20000, 2000
NODES = {"spot-1": "spot", "spot-2": "spot", "od-1": "on-demand"}
SCRAPE_S = 1.0


@dataclass
class Attempt:
    pod: str
    node: str
    ledger: dict
    """The attempt's goodput and badput seconds at its end (spotsafe.goodput.Ledger.to_json)."""
    resumed_from: int | None
    reached: int
    ended_at: float


@dataclass
class Recorded:
    url: str
    attempts: list[Attempt]
    redo_until: int
    """The run's progress record as the last attempt read it: how far the killed one got."""
    training: dict
    """Status while the last attempt trained."""


class KubeStateMetrics(BaseHTTPRequestHandler):
    """kube-state-metrics' two series the placement recording joins: each pod's node, and each
    node's GPU class and capacity type."""

    pods: dict[str, str] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        lines = ["# TYPE kube_pod_info gauge"]
        lines += [
            f'kube_pod_info{{namespace="{NAMESPACE}",pod="{pod}",node="{node}"}} 1'
            for pod, node in self.pods.items()
        ]
        lines.append("# TYPE kube_node_labels gauge")
        lines += [
            f'kube_node_labels{{node="{node}",label_gpu_class="{GPU_CLASS}",'
            f'label_capacity_type="{kind}"}} 1'
            for node, kind in NODES.items()
        ]
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def metrics_of(port: int) -> dict[str, list]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def ledger_of(families: dict[str, list]) -> dict:
    return {
        "goodput_s": families["spotsafe_goodput_seconds"][0].value,
        "badput_s": {
            s.labels["cause"]: s.value
            for s in families["spotsafe_badput_seconds"]
            if s.name.endswith("_total")
        },
    }


def step_of(port: int) -> int:
    try:
        return int(metrics_of(port)["spotsafe_training_step"][0].value)
    except OSError:
        return 0


def wait_for(condition, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def status(url: str, out: Path, *extra: str) -> dict:
    args = ["status", "--prometheus", url, "--run", RUN, "--json", str(out), *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


class Pods:
    """Pods of the run, started as the Job controller starts them, each on its node."""

    def __init__(self, root: Path, targets: Path) -> None:
        self.uri = f"file://{root / 'checkpoints' / RUN}"
        self.root, self.targets, self.entries = root, targets, []
        self.env = {goodput.PROGRESS_ENV: "0.1", "SPOTSAFE_NOTICE_SOURCES": "sigterm"}

    def start(self, pod: str, node: str) -> tuple[subprocess.Popen, int]:
        KubeStateMetrics.pods[pod] = node
        port = free_port()
        self.entries.append(
            {
                "targets": [f"127.0.0.1:{port}"],
                "labels": {"namespace": NAMESPACE, "pod": pod, "run": RUN},
            }
        )
        self.targets.write_text(json.dumps(self.entries))
        argv = JobSpec(RUN, seed=7, steps=STEPS, every_steps=EVERY, size="small").argv(
            self.uri, port
        )
        with (self.root / f"{pod}.log").open("w") as err:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env={**os.environ, **self.env},
            )
        return proc, port

    def progress(self) -> int:
        records = (Path(self.uri.removeprefix("file://")) / goodput.PROGRESS_PREFIX).glob("*")
        return max(json.loads(r.read_text())["step"] for r in records)


def finished(proc: subprocess.Popen, pod: str, node: str) -> Attempt:
    out, _ = proc.communicate(timeout=120)
    ended = time.time()
    result = json.loads(out.strip().splitlines()[-1])
    return Attempt(
        pod, node, result["goodput"], result["resumed_from"], result["final_step"], ended
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    root = tmp_path_factory.mktemp("status")
    kube = ThreadingHTTPServer(("127.0.0.1", 0), KubeStateMetrics)
    threading.Thread(target=kube.serve_forever, daemon=True).start()
    rules = {"groups": [prices.price_group(SETTINGS.kubernetes.monitoring, [GPU_CLASS])]}
    rules["groups"] += alert_groups("https://runbooks.example")
    (root / "rules.yaml").write_text(yaml.safe_dump(rules))
    (root / "targets.json").write_text("[]")
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S:g}s", "evaluation_interval": "1s"},
        "rule_files": [str(root / "rules.yaml")],
        "scrape_configs": [
            {
                "job_name": "spot-training",
                "file_sd_configs": [
                    {"files": [str(root / "targets.json")], "refresh_interval": "1s"}
                ],
            },
            {
                "job_name": "kube-state-metrics",
                "static_configs": [{"targets": [f"127.0.0.1:{kube.server_address[1]}"]}],
            },
        ],
    }
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    pods = Pods(root, root / "targets.json")
    with prometheus_server(root / "prometheus.yml", root / "data") as url:
        # A notice once past the first checkpoints: the final save keeps the step reached.
        proc, port = pods.start("llama-1", "spot-1")
        wait_for(
            lambda: step_of(port) >= 2 * EVERY + EVERY // 2, "llama-1 trains past 2 checkpoints"
        )
        wait_for(lambda: scraped(url, "llama-1"), "Prometheus scrapes llama-1")
        proc.send_signal(signal.SIGTERM)
        first = finished(proc, "llama-1", "spot-1")
        assert proc.returncode == EXIT_PREEMPTED

        # Killed with no notice half a checkpoint interval past its last checkpoint, once the
        # progress record has got there too.
        proc, port = pods.start("llama-2", "spot-2")
        kill_at = (first.reached // EVERY + 3) * EVERY + EVERY // 2
        wait_for(lambda: step_of(port) >= kill_at, "llama-2 trains")
        wait_for(lambda: pods.progress() >= kill_at, "progress recorded")
        wait_for(lambda: scraped(url, "llama-2"), "Prometheus scrapes llama-2")
        families = metrics_of(port)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        second = Attempt(
            "llama-2",
            "spot-2",
            ledger_of(families),
            int(families["spotsafe_resumed_from_step"][0].value),
            int(families["spotsafe_training_step"][0].value),
            time.time(),
        )
        redo_until = pods.progress()

        proc, port = pods.start("llama-3", "od-1")
        out = root / "training.json"
        wait_for(lambda: step_of(port) > 0, "llama-3 trains")
        wait_for(lambda: status(url, out)["runs"][0]["training_now"], "status: training now")
        training = json.loads(out.read_text())
        assert proc.poll() is None, "still training when status said so"
        third = finished(proc, "llama-3", "od-1")
        time.sleep(2 * SCRAPE_S)  # the scrape that finds llama-3 gone marks its series stale
        yield Recorded(url, [first, second, third], redo_until, training)
    kube.shutdown()


def scraped(url: str, pod: str) -> bool:
    """Whether Prometheus has read the pod's ledger at least once: a fast attempt can end before
    the file discovery and the next scrape find it."""
    answer = requests.get(
        f"{url}/api/v1/query",
        params={"query": f'spotsafe_goodput_seconds_total{{pod="{pod}"}}'},
        timeout=10,
    ).json()
    return bool(answer["data"]["result"])


def last_scrape(url: str, pod: str) -> float:
    """When Prometheus last read the pod's ledger: the newest sample's timestamp."""
    answer = requests.get(
        f"{url}/api/v1/query",
        params={"query": f'spotsafe_goodput_seconds_total{{pod="{pod}"}}[1h]'},
        timeout=10,
    ).json()
    return float(answer["data"]["result"][0]["values"][-1][0])


def test_status_agrees_with_the_ledger_the_series_came_from(
    recorded: Recorded, tmp_path: Path
) -> None:
    report = status(recorded.url, tmp_path / "status.json")
    (run,) = report["runs"]
    first, second, third = recorded.attempts
    assert (run["namespace"], run["run"]) == (NAMESPACE, RUN)
    assert run["training_now"] is False
    assert recorded.training["runs"][0]["training_now"] is True

    # Attempts, recoveries and the step each resumed from: exact.
    assert [a["attempt"] for a in run["attempts"]] == [1, 2, 3]
    assert [a["pods"] for a in run["attempts"]] == [["llama-1"], ["llama-2"], ["llama-3"]]
    assert run["recoveries"] == 2
    assert first.resumed_from is None
    assert second.resumed_from == first.reached, "the notice's final save kept the step reached"
    assert third.resumed_from < second.reached
    assert run["resumed_from"] == [second.resumed_from, third.resumed_from]
    assert [a["resumed_from"] for a in run["attempts"]] == [None, *run["resumed_from"]]
    # Lost steps: those the killed attempt reached on the run's progress record, which the next
    # one computed again (the ledger's lost work); the step the kill met lies at most one record
    # interval (0.1 s of steps) beyond.
    lost = recorded.redo_until - third.resumed_from
    assert lost > 0
    assert [a["lost_steps"] for a in run["attempts"]] == [0, 0, lost]
    assert run["lost_steps"] == lost
    assert recorded.redo_until <= second.reached
    assert third.reached == STEPS

    # The seconds: Prometheus holds each process's ledger as of its last scrape; the process
    # went on until it ended, so each figure is at most that short of the ledger, per attempt:
    # sampling, not accounting.
    total = {"goodput": 0.0, **dict.fromkeys(RUN_CAUSES, 0.0)}
    gaps = 0.0
    for attempt, seen in zip(recorded.attempts, run["attempts"], strict=True):
        # From the last scrape until the test saw the process gone: an upper bound.
        gap = attempt.ended_at - last_scrape(recorded.url, attempt.pod)
        assert gap >= 0
        gaps += gap
        truth = {"goodput": attempt.ledger["goodput_s"], **attempt.ledger["badput_s"]}
        shown = {"goodput": seen["goodput_s"], **seen["badput_s"]}
        for key, seconds in truth.items():
            assert seconds - gap - 1e-6 <= shown[key] <= seconds + 1e-6, (attempt.pod, key)
            total[key] += seconds
        assert shown["scheduling"] == 0  # no kube-state-metrics pod timings in this cluster
    # The step: the last one Prometheus read, short of the last one taken by the steps of the
    # gap after the last scrape, at the attempt's own pace.
    stepped = third.ledger["goodput_s"] + third.ledger["badput_s"]["lost_work"]
    pace = (third.reached - third.resumed_from) / stepped
    assert 0 <= third.reached - run["step"] <= pace * gap + 1
    g = run["goodput"]
    shown = {"goodput": g["goodput_s"], **g["badput_s"]}
    for key, seconds in total.items():
        assert seconds - gaps - 1e-6 <= shown[key] <= seconds + 1e-6, key
    assert g["badput_s"]["lost_work"] > 0 and g["badput_s"]["restore"] > 0
    ledger_s = sum(total.values())
    assert g["run_s"] == pytest.approx(sum(shown.values()))
    assert abs(g["ratio"] - total["goodput"] / ledger_s) <= gaps / (ledger_s - gaps)

    # GPU-hours and cost by capacity type: the first two attempts ran on spot, the third on
    # on-demand, priced at the stack's GPU-hour prices.
    def hours(attempts: list[Attempt]) -> float:
        return sum(a.ledger["goodput_s"] + sum(a.ledger["badput_s"].values()) for a in attempts)

    spot, on_demand = run["capacity"]["spot"], run["capacity"]["on-demand"]
    assert set(run["capacity"]) == {"spot", "on-demand"}
    assert [a["capacity_types"] for a in run["attempts"]] == [["spot"], ["spot"], ["on-demand"]]
    assert 0 <= hours([first, second]) / 3600 - spot["gpu_hours"] <= gaps / 3600
    assert 0 <= hours([third]) / 3600 - on_demand["gpu_hours"] <= gaps / 3600
    assert spot["cost_usd"] == pytest.approx(spot["gpu_hours"] * PRICES.spot)
    assert on_demand["cost_usd"] == pytest.approx(on_demand["gpu_hours"] * PRICES.on_demand)
    assert run["cost_usd"] == pytest.approx(spot["cost_usd"] + on_demand["cost_usd"])
    assert runs.PRICE_RECORD == prices.PRICE_RECORD
    assert {(p["capacity_type"], p["usd_per_gpu_hour"]) for p in run["prices"]} == {
        ("spot", PRICES.spot),
        ("on-demand", PRICES.on_demand),
    }

    # The notice reached the first attempt only; the kill gave none.
    assert run["attempts"][1]["notices"] == run["attempts"][2]["notices"] == {}
    assert run["attempts"][0]["notices"] in ({}, {"sigterm": 1})  # gone within a scrape or not


def test_the_console_names_the_run_its_state_and_costs(recorded: Recorded) -> None:
    result = CliRunner().invoke(
        app, ["status", "--prometheus", recorded.url, "--team", NAMESPACE], terminal_width=160
    )
    assert result.exit_code == 0, result.output
    shown = re.search(rf"{NAMESPACE}/{RUN}: not training, step (\d+)", result.output)
    assert shown and STEPS - EVERY < int(shown[1]) <= STEPS
    for label in ("recoveries", "lost steps", "badput: lost work", "GPU-hours on spot", "cost"):
        assert label in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run", "bert"], "no run bert in Prometheus at {url} over the last 7d; runs there: "),
        (["--team", "language"], "no run language in Prometheus at {url} over the last 7d; "),
        (["--team", "language", "--run", RUN], "no run language/llama in Prometheus at {url} "),
        (["--run", RUN, "--since", "week"], "--since 'week' is not a Prometheus duration"),
        ([], "give --run RUN (its Job's name), --team NAMESPACE, or both"),
    ],
)
def test_a_bad_input_is_one_line(recorded: Recorded, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["status", "--prometheus", recorded.url, *args])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {message.format(url=recorded.url)}")
    if message.startswith("no run"):
        assert line.endswith(f"; runs there: {NAMESPACE}/{RUN}")


def test_an_unreachable_prometheus_is_one_line_with_its_url_and_what_failed() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["status", "--prometheus", url, "--run", RUN])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: Prometheus at {url}: ConnectionError: Connection refused"
    )


# ---- a team over backfilled series: attempts of several pods and ranks ---------------------
TEAM = "language"
RANKS = ("r0", "r1")
GAUGES = ("spotsafe_attempt", "spotsafe_resumed_from_step", "spotsafe_redo_until_step")


def team_openmetrics(t0: int) -> str:
    """Run bert: attempt 1 on two spot pods of two ranks each, stopped by an AWS notice at
    t0-300; attempt 2 on two pods, one on on-demand and one whose node Prometheus never saw,
    training until t0. Run gpt: one process, long finished."""
    first = range(t0 - 900, t0 - 299, 15)
    second = range(t0 - 240, t0 + 1, 15)
    pods = {"bert-a0": first, "bert-a1": first, "bert-b0": second, "bert-b1": second}
    bert = {"namespace": TEAM, "run": "bert"}
    good, bad, gauges, notices, steps = [], [], [], [], []
    for pod, grid in pods.items():
        attempt = 1 if pod.startswith("bert-a") else 2
        for rank in RANKS:
            labels = {**bert, "pod": pod, "instance": f"{pod}:{rank}"}
            start = grid[0]
            good += series(
                "spotsafe_goodput_seconds_total", labels, [(t, (t - start) / 9) for t in grid]
            )
            causes = {"pod_start": 10.0} if attempt == 1 else {"restore": 2.0, "lost_work": 4.0}
            for cause, seconds in causes.items():
                bad += series(
                    "spotsafe_badput_seconds_total",
                    {**labels, "cause": cause},
                    [(t, seconds) for t in grid],
                )
            values = (attempt, -1, 0) if attempt == 1 else (attempt, 500, 540)
            for name, value in zip(GAUGES, values, strict=True):
                gauges += series(name, labels, [(t, value) for t in grid])
            base = 0 if attempt == 1 else 500
            steps += series("spotsafe_training_step", labels, [(t, base + t - start) for t in grid])
            if attempt == 1:
                notices += series(
                    "spotsafe_termination_notices_total",
                    {**labels, "source": "aws", "kind": "preemption"},
                    [(t, 1) for t in grid if t >= t0 - 330],
                )
    old = range(t0 - 3000, t0 - 2000, 15)
    gpt = {"namespace": TEAM, "run": "gpt", "pod": "gpt-0", "instance": "gpt-0:r0"}
    good += series("spotsafe_goodput_seconds_total", gpt, [(t, 60.0) for t in old])
    now = range(t0 - 900, t0 + 1, 15)
    placement = [
        line
        for pod, kind in (("bert-a0", "spot"), ("bert-a1", "spot"), ("bert-b0", "on-demand"))
        for line in series(
            runs.PLACEMENT,
            {
                "namespace": TEAM,
                "pod": pod,
                "label_gpu_class": GPU_CLASS,
                "label_capacity_type": kind,
            },
            [(t, 1) for t in now],
        )
    ]
    price_lines = [
        line
        for kind, usd in (("spot", PRICES.spot), ("on-demand", PRICES.on_demand))
        for line in series(
            prices.PRICE_RECORD,
            {"label_gpu_class": GPU_CLASS, "label_capacity_type": kind},
            [(t, usd) for t in now],
        )
    ]
    return openmetrics(
        [
            ("spotsafe_goodput_seconds", "counter", good),
            ("spotsafe_badput_seconds", "counter", bad),
            ("spotsafe_termination_notices", "counter", notices),
            *(
                (name, "gauge", [line for line in gauges if line.startswith(name + "{")])
                for name in GAUGES
            ),
            ("spotsafe_training_step", "gauge", steps),
            (runs.PLACEMENT, "gauge", placement),
            (prices.PRICE_RECORD, "gauge", price_lines),
        ]
    )


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("team")
    with backfilled_prometheus(root, team_openmetrics(int(time.time()))) as url:
        yield url


def test_a_teams_runs_group_their_pods_and_ranks_by_attempt(team: str, tmp_path: Path) -> None:
    out = tmp_path / "team.json"
    result = CliRunner().invoke(
        app, ["status", "--prometheus", team, "--team", TEAM, "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    bert, gpt = json.loads(out.read_text())["runs"]
    assert (bert["run"], gpt["run"]) == ("bert", "gpt")
    assert gpt["training_now"] is False and gpt["recoveries"] == 0
    assert gpt["capacity"] == {"unknown": {"gpu_hours": 60 / 3600, "cost_usd": None}}

    first, second = bert["attempts"]
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert first["pods"] == ["bert-a0", "bert-a1"] and second["pods"] == ["bert-b0", "bert-b1"]
    assert first["notices"] == {"aws": 1}, "each rank heard the same notice: counted once"
    assert second["notices"] == {}
    assert (first["resumed_from"], second["resumed_from"]) == (None, 500)
    assert (first["lost_steps"], second["lost_steps"]) == (0, 40)
    assert bert["recoveries"] == 1 and bert["lost_steps"] == 40
    assert bert["training_now"] is True
    assert (first["training_now"], second["training_now"]) == (False, True)
    assert first["reached_step"] == 600 and bert["step"] == 500 + 240

    # Four processes per attempt: goodput 600 / 9 s and 240 / 9 s each.
    g = bert["goodput"]
    assert g["goodput_s"] == pytest.approx(4 * 600 / 9 + 4 * 240 / 9)
    assert g["badput_s"]["pod_start"] == pytest.approx(40)
    assert g["badput_s"]["restore"] == pytest.approx(8)
    assert g["badput_s"]["lost_work"] == pytest.approx(16)
    per_b = (240 / 9 + 6) / 3600
    assert bert["capacity"]["spot"]["gpu_hours"] == pytest.approx(4 * (600 / 9 + 10) / 3600)
    assert bert["capacity"]["on-demand"]["gpu_hours"] == pytest.approx(2 * per_b)
    assert bert["capacity"]["unknown"] == {"gpu_hours": pytest.approx(2 * per_b), "cost_usd": None}
    assert bert["capacity"]["on-demand"]["cost_usd"] == pytest.approx(2 * per_b * PRICES.on_demand)
    assert bert["cost_usd"] is None, "a pod on an unknown node leaves the run's cost unpriced"
    assert "unpriced" in result.output
