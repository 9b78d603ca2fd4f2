"""`spotctl drill --cloud-run`: the cloud's interruptions, then the report from the cluster's
goodput ledger in a real Prometheus.

Real parts: AWS FIS is moto's server on loopback (its FIS backend keeps the API's experiment
states, pending to completed, and refuses an unknown template); boto3 validates each request
against FIS's service model. Prometheus is the Debian package's server, on loopback, over a TSDB
backfilled with `promtool tsdb create-blocks-from openmetrics` with the runtime's ledger series
(spotsafe.metrics) and the cluster's pod recording (components/k8s/rules). The Compute API has no
emulator: GKE runs against a loopback fake that enforces what the API reference documents for the
calls used (OAuth bearer token, `instances.aggregatedList` with a label filter, an Operation from
`instances.simulateMaintenanceEvent` on a RUNNING VM only, `zoneOperations.wait` until DONE).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import date
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from json_http import JsonHandler
from prometheus_server import backfilled_prometheus, openmetrics, series
from rich.console import Console
from spotsafe.local.servers import free_port
from stack_files import REPO_ROOT, stack_values
from typer.testing import CliRunner

from components.aws.drill import DRILL_TAG
from components.config import load_config
from spotctl.cli import app
from spotctl.drill.cloud_run import cloud_drill
from spotctl.drill.config import CloudRun
from spotctl.review.collect import Review, review_drills

PROD = load_config(stack_values("prod"))
GCP_PROD = load_config(stack_values("gcp-prod"))
STEP_S = 15
RECOVERY_S = 1500.0


def ledger_openmetrics(t0: int) -> str:
    """Two runs around t0: vision/llama loses its pod at t0+60 after a notice (its final save
    5 s) and resumes on a new pod from t0+300; language/bert trains throughout. A pod that was
    there before the drill carries a scheduling wait (999 s) that is not the drill's."""
    grid = range(t0 - 900, t0 + 1801, STEP_S)
    a = [t for t in grid if t <= t0 + 60]
    b = [t for t in grid if t >= t0 + 300]
    llama = {"namespace": "vision", "run": "llama"}
    bert = {"namespace": "language", "run": "bert"}
    pods = {
        "llama-a": ({**llama, "pod": "llama-a"}, a),
        "llama-b": ({**llama, "pod": "llama-b"}, b),
        "bert-a": ({**bert, "pod": "bert-a"}, list(grid)),
    }
    good = [
        *series(
            "spotsafe_goodput_seconds_total", pods["llama-a"][0], [(t, t - t0 + 3600) for t in a]
        ),
        *series(
            "spotsafe_goodput_seconds_total", pods["llama-b"][0], [(t, t - t0 - 300) for t in b]
        ),
        *series(
            "spotsafe_goodput_seconds_total", pods["bert-a"][0], [(t, t - t0 + 3600) for t in grid]
        ),
    ]
    causes = {
        "llama-a": {"pod_start": lambda t: 40, "final_saves": lambda t: 5 if t >= t0 + 60 else 0},
        "llama-b": {"pod_start": lambda t: 40, "restore": lambda t: 20},
        "bert-a": {"pod_start": lambda t: 50, "blocking_saves": lambda t: (t - t0 + 900) / 100},
    }
    bad = [
        line
        for pod, by_cause in causes.items()
        for cause, value in by_cause.items()
        for line in series(
            "spotsafe_badput_seconds_total",
            {**pods[pod][0], "cause": cause},
            [(t, value(t)) for t in pods[pod][1]],
        )
    ]
    notices = series(
        "spotsafe_termination_notices_total",
        {**pods["llama-a"][0], "source": "aws", "kind": "preemption"},
        [(t, 1) for t in a if t >= t0 + 45],
    )
    recorded = "namespace_pod_cause:spot_training_pod_badput_seconds"
    pod_badput = [
        *series(recorded, {**pods["llama-a"][0], "cause": "scheduling"}, [(t, 999) for t in a]),
        *series(recorded, {**pods["llama-b"][0], "cause": "scheduling"}, [(t, 30) for t in b]),
        *series(recorded, {**pods["llama-b"][0], "cause": "pod_start"}, [(t, 100) for t in b]),
    ]
    created = [
        *series(
            "kube_pod_created",
            {"namespace": "vision", "pod": "llama-a"},
            [(t, t0 - 3600) for t in a],
        ),
        *series(
            "kube_pod_created",
            {"namespace": "vision", "pod": "llama-b"},
            [(t, t0 + 150) for t in b],
        ),
    ]
    families = [
        ("spotsafe_goodput_seconds", "counter", good),
        ("spotsafe_badput_seconds", "counter", bad),
        ("spotsafe_termination_notices", "counter", notices),
        (recorded, "gauge", pod_badput),
        ("kube_pod_created", "gauge", created),
    ]
    return openmetrics(families)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A real Prometheus over the backfilled ledger; yields its URL and the drill's t0."""
    root = tmp_path_factory.mktemp("prometheus")
    t0 = int(time.time())
    with backfilled_prometheus(root, ledger_openmetrics(t0)) as url:
        yield url, t0


def no_wait(seconds: float) -> None:
    """The drill's waits (FIS polls, the runs' recovery) pass at once: the ledger is backfilled."""


def fis_template(env: str, pool: str) -> str:
    """A template as components/aws/drill.py declares it, in moto's FIS (once per session)."""
    fis = boto3.client("fis", region_name=PROD.region)
    tags = {"env": env, DRILL_TAG: pool}
    for existing in fis.list_experiment_templates()["experimentTemplates"]:
        if existing["tags"] == tags:
            return existing["id"]
    template = fis.create_experiment_template(
        clientToken=f"{env}-{pool}",
        description=f"Spot interruption notices to 50% of {pool}",
        roleArn="arn:aws:iam::123456789012:role/drill",
        stopConditions=[{"source": "none"}],
        targets={
            "SpotInstances": {
                "resourceType": "aws:ec2:spot-instance",
                "selectionMode": "PERCENT(50)",
                "resourceTags": {"karpenter.sh/nodepool": pool},
            }
        },
        actions={
            "interrupt": {
                "actionId": "aws:ec2:send-spot-instance-interruptions",
                "parameters": {"durationBeforeInterruption": "PT2M"},
                "targets": {"SpotInstances": "SpotInstances"},
            }
        },
        tags=tags,
    )
    return template["experimentTemplate"]["id"]


@pytest.fixture
def prod_template(aws_env: str) -> str:
    """prod's template, beside dev's of the same pool name, which must not be taken."""
    pool = f"{PROD.aws.spot_drill.gpu_class}-spot"
    fis_template("dev", pool)
    return fis_template(PROD.environment, pool)


def experiments(template_id: str) -> list[dict]:
    fis = boto3.client("fis", region_name=PROD.region)
    found = fis.list_experiments(experimentTemplateId=template_id)["experiments"]
    return sorted(found, key=lambda e: e["id"])


def test_an_eks_drill_starts_the_stacks_template_and_reports_the_ledger(
    prometheus, prod_template: str, tmp_path: Path
) -> None:
    url, _ = prometheus
    before = experiments(prod_template)
    out = tmp_path / "drills" / "cloud" / "2026-11-02.json"
    run = CloudRun("prod", url, RECOVERY_S)
    report = cloud_drill(run, False, out, Console(quiet=True), REPO_ROOT, wait=no_wait)
    assert json.loads(out.read_text(), parse_constant=_refuse) == report

    (experiment,) = [e for e in experiments(prod_template) if e not in before]
    assert experiment["experimentTemplateId"] == prod_template
    assert experiment["state"]["status"] == "completed"
    assert report["config"]["target"] == {
        "experiment_template_id": prod_template,
        "experiment_id": experiment["id"],
    }
    assert report["kind"] == "cloud"
    assert report["duration_s"] == pytest.approx(RECOVERY_S, abs=30)

    jobs = report["goodput"]["jobs"]
    assert set(jobs) == {"vision/llama", "language/bert"}
    llama, bert = jobs["vision/llama"], jobs["language/bert"]
    # The new pod's counters count in full, the old one's by their growth in the window.
    assert llama["goodput_s"] == pytest.approx(60 + RECOVERY_S - 300, abs=25)
    assert llama["badput_s"]["final_saves"] == pytest.approx(5, abs=1)
    assert llama["badput_s"]["restore"] == pytest.approx(20)
    # The new pod's start from the runtime (40 s) and from kube-state-metrics (100 s); the
    # old pod's scheduling wait came before the drill.
    assert llama["badput_s"]["pod_start"] == pytest.approx(140)
    assert llama["badput_s"]["scheduling"] == pytest.approx(30)
    assert bert["badput_s"]["pod_start"] == 0 and bert["badput_s"]["scheduling"] == 0
    assert bert["goodput_s"] == pytest.approx(RECOVERY_S, abs=25)
    assert report["goodput"]["ratio"] == pytest.approx(
        (llama["goodput_s"] + bert["goodput_s"]) / (llama["run_s"] + bert["run_s"])
    )

    (notice,) = report["interruptions"]
    assert (notice["job"], notice["kind"], notice["source"]) == ("vision/llama", "notice", "aws")
    assert notice["notice_to_durable_s"] is None  # not measured, and said so
    assert "interruptions[].notice_to_durable_s" in report["not_measured"]
    runs = {j["name"]: j for j in report["jobs"]}
    # llama trains until t0+60 (the 1 m rate until about t0+120), again from t0+300.
    assert 150 <= runs["vision/llama"]["longest_stall_s"] <= 270
    assert runs["language/bert"]["longest_stall_s"] == 0
    assert all(j["recovered"] for j in report["jobs"])
    assert report["goals"]["weights_match_references"] is None

    # The quarterly review reads it beside the local drill's reports.
    review = Review("2026Q4", date.today())
    review_drills(review, tmp_path / "drills")
    (row,) = review.sections["drills"]
    assert (row["report"], row["kind"], row["jobs"], row["finished"]) == (
        "cloud/2026-11-02.json",
        "cloud",
        2,
        2,
    )
    assert row["goodput"] == report["goodput"]["ratio"] and row["weights_match"] is None
    assert not [f for f in review.flags if "cloud/" in f]
    report["jobs"][0]["recovered"] = False
    out.write_text(json.dumps(report))
    review_drills(review, tmp_path / "drills")
    assert any("cloud/2026-11-02.json: a run was not training again" in f for f in review.flags)
    # A report of no runs is no drill passed: it is flagged, not counted as all recovered.
    out.write_text(json.dumps({**report, "jobs": []}))
    review = Review("2026Q4", date.today())
    review_drills(review, tmp_path / "drills")
    assert "drill cloud/2026-11-02.json: no training run in its window" in review.flags


def test_a_run_not_training_at_the_windows_end_fails_the_drill_after_its_report(
    prometheus, prod_template: str, tmp_path: Path
) -> None:
    """A window that ends while vision/llama is between its pods (t0+60 to t0+300)."""
    from spotctl.drill.cloud import CloudRunError

    url, _ = prometheus
    out = tmp_path / "short.json"
    run = CloudRun("prod", url, 120.0)
    with pytest.raises(CloudRunError) as failed:
        cloud_drill(run, False, out, Console(quiet=True), REPO_ROOT, wait=no_wait)
    assert str(failed.value) == "not training again at the window's end: vision/llama"
    report = json.loads(out.read_text())
    assert {j["name"]: j["recovered"] for j in report["jobs"]} == {
        "vision/llama": False,
        "language/bert": True,
    }


def test_stalls_follow_the_points_prometheus_returns_when_the_step_is_not_whole_ms(
    prometheus,
) -> None:
    """A window over 15000 s has a step of a thousandth of it (here 15.80025 s), which Prometheus
    truncates to whole milliseconds (15.8 s): its points drift off a grid rebuilt from the step
    asked for. Both runs train at the window's end; before the ledger begins, none trained."""
    from spotctl.drill import ledger

    url, t0 = prometheus
    start, end = t0 - 14000.25, t0 + 1800
    runs, sent = ledger.read(ledger.Prometheus(url), start, end)
    assert sent["training (range)"].endswith("every 15.8003 s")
    assert {name: r["training_at_end"] for name, r in runs.items()} == {
        "vision/llama": True,
        "language/bert": True,
    }
    for r in runs.values():
        assert r["longest_stall_s"] == pytest.approx(t0 - 900 - start, abs=2 * 15.8)


def test_a_window_with_no_training_run_is_an_error_not_an_empty_report(prometheus) -> None:
    """A Prometheus that holds no run's ledger over the window (a wrong URL, nothing training
    on the class): here the hours before the backfilled ledger begins."""
    from spotctl.drill import ledger

    url, t0 = prometheus
    with pytest.raises(ledger.PrometheusError) as failed:
        ledger.read(ledger.Prometheus(url), t0 - 7200, t0 - 5400)
    assert str(failed.value).startswith(
        f"Prometheus at {url}: no training run in the goodput ledger from "
        f"{ledger.iso(t0 - 7200)} to {ledger.iso(t0 - 5400)}"
    )


def _refuse(name: str) -> None:
    raise AssertionError(f"the report holds {name}: JSON must stay strict")


def test_a_dry_run_names_the_template_and_the_queries_and_starts_nothing(
    prod_template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO_ROOT)
    before = experiments(prod_template)
    result = CliRunner().invoke(app, ["drill", "--cloud-run", "prod", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"start FIS experiment template {prod_template}" in result.output
    assert f"NodePool {PROD.aws.spot_drill.gpu_class}-spot" in result.output
    assert "spotsafe_goodput_seconds_total" in result.output
    assert "namespace_pod_cause:spot_training_pod_badput_seconds" in result.output
    assert experiments(prod_template) == before


def test_the_stack_is_read_from_program_outside_the_project(
    prod_template: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a Pulumi project the stack needs --program, which the error names."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["drill", "--cloud-run", "prod", "--dry-run"])
    assert result.exit_code == 2 and "pass --program" in result.output
    result = CliRunner().invoke(
        app, ["drill", "--cloud-run", "prod", "--dry-run", "--program", str(REPO_ROOT)]
    )
    assert result.exit_code == 0, result.output
    assert f"start FIS experiment template {prod_template}" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cloud-run", "nowhere", "--dry-run"], "--cloud-run nowhere: no stack 'nowhere'"),
        (["--cloud-run", "dev", "--dry-run"], "stack dev sets no aws.spot_drill"),
        (["--cloud-run", "prod"], "--prometheus is required with --cloud-run"),
        (
            ["--cloud-run", "prod", "--prometheus", "localhost:9090"],
            "--prometheus 'localhost:9090' is not an http(s) URL",
        ),
        (["--cloud-run", "prod", "--dry-run", "--recovery-s", "-1"], "--recovery-s must be"),
        (["--cloud-run", "prod", "--dry-run", "--percent", "10"], "are for GKE stacks"),
        (["--cloud-run", "gcp-prod", "--dry-run", "--percent", "0"], "--percent must be"),
        (
            ["--cloud-run", "gcp-prod", "--dry-run", "--gpu-class", "a100"],
            "--gpu-class 'a100' is not a class of the stack (l4-24gb, h100-80gb)",
        ),
        (["--dry-run"], "--dry-run goes with --cloud-run"),
    ],
)
def test_a_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO_ROOT)
    result = CliRunner().invoke(app, ["drill", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


class FakeCompute(JsonHandler):
    """The Compute API calls the drill makes, as the API reference documents them."""

    token = "ya29.drill"
    vms: dict[str, dict] = {}
    listed: list[str] = []
    simulated: list[str] = []
    filter_term = re.compile(r'\((labels\.[a-z0-9_-]+|status) = "([^"]*)"\)')

    def _error(self, status: int, message: str) -> None:
        self.send_json(status, {"error": {"code": status, "message": message}})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/token":  # OAuth 2.0 JWT bearer grant of a service account's key
            length = int(self.headers.get("Content-Length", 0))
            grant = parse_qs(self.rfile.read(length).decode())
            if grant.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
                self.send_json(400, {"error": "unsupported_grant_type"})
                return
            self.send_json(200, {"access_token": self.token, "expires_in": 3600})
            return
        if not self._authorized():
            return
        parts = url.path.strip("/").split("/")
        if parts[-1] == "simulateMaintenanceEvent" and len(parts) == 7:
            _, project, _, zone, _, name, _ = parts
            vm = self.vms.get(f"{zone}/{name}")
            if project != GCP_PROD.gcp.project or vm is None:
                self._error(
                    404,
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' "
                    "was not found",
                )
                return
            if vm["status"] != "RUNNING":
                self._error(400, f"Instance {name} is not running")
                return
            self.simulated.append(name)
            self.send_json(
                200,
                {
                    "kind": "compute#operation",
                    "name": f"op-{name}",
                    "status": "PENDING",
                    "zone": zone,
                    "targetLink": name,
                },
            )
        elif parts[-1] == "wait" and parts[-3] == "operations":
            self.send_json(200, {"kind": "compute#operation", "name": parts[-2], "status": "DONE"})
        else:
            self._error(404, "unknown method")

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if not self._authorized():
            return
        if url.path != f"/projects/{GCP_PROD.gcp.project}/aggregated/instances":
            self._error(404, "unknown method")
            return
        query = parse_qs(url.query).get("filter", [""])[0]
        self.listed.append(query)
        terms = self.filter_term.findall(query)
        if not terms or self.filter_term.sub("", query).strip():
            self._error(400, f"Invalid value for field 'filter': '{query}'")
            return

        def matches(vm: dict) -> bool:
            return all(
                (vm["status"] if key == "status" else vm["labels"].get(key[7:])) == value
                for key, value in terms
            )

        items: dict[str, dict] = {}
        for vm in self.vms.values():
            if matches(vm):
                items.setdefault(f"zones/{vm['zone_name']}", {"instances": []})["instances"].append(
                    {
                        "name": vm["name"],
                        "zone": f"https://www.googleapis.com/compute/v1/projects/p/zones/{vm['zone_name']}",
                        "status": vm["status"],
                        "labels": vm["labels"],
                    }
                )
        self.send_json(200, {"kind": "compute#instanceAggregatedList", "items": items})

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self._error(401, "Request is missing required authentication credential.")
            return False
        return True


@pytest.fixture
def compute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCompute]:
    """Three running Spot VMs of the first class's pool, one stopped, one of another class."""
    gpu_class = GCP_PROD.gpu_classes[0]
    pool = f"{gpu_class.name}-spot-{gpu_class.instance_types[0]}"
    cluster = GCP_PROD.gcp.cluster.name
    zone = GCP_PROD.zones[0]

    def vm(name: str, node_pool: str, status: str = "RUNNING") -> dict:
        labels = {"goog-k8s-cluster-name": cluster, "goog-k8s-node-pool-name": node_pool}
        return {"name": name, "zone_name": zone, "status": status, "labels": labels}

    FakeCompute.vms = {
        f"{zone}/{v['name']}": v
        for v in (
            vm("gke-c-node-3", pool),
            vm("gke-c-node-1", pool),
            vm("gke-c-node-2", pool),
            vm("gke-c-node-0", pool, "TERMINATED"),
            vm("gke-c-other-1", "h100-80gb-spot-a3-highgpu-8g"),
        )
    }
    FakeCompute.listed, FakeCompute.simulated = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeCompute)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    credentials = tmp_path / "adc.json"
    credentials.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": GCP_PROD.gcp.project,
                "private_key_id": "drill",
                "private_key": key.decode(),
                "client_email": f"drill@{GCP_PROD.gcp.project}.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": f"{base}/token",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
    monkeypatch.setenv("CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE", f"{base}/")
    monkeypatch.chdir(REPO_ROOT)
    try:
        yield FakeCompute
    finally:
        server.shutdown()


def test_a_gke_drill_preempts_half_the_class_running_spot_vms(
    compute: type[FakeCompute], prometheus, tmp_path: Path
) -> None:
    """Half of three running VMs, rounded up, by name; never a stopped one or another class's."""
    dry = CliRunner().invoke(app, ["drill", "--cloud-run", "gcp-prod", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "gke-c-node-1" in dry.output and "gke-c-node-2" in dry.output
    assert "gke-c-node-3" not in dry.output and compute.simulated == []

    url, _ = prometheus
    out = tmp_path / "gke.json"
    compute.listed.clear()
    report = cloud_drill(
        CloudRun("gcp-prod", url, RECOVERY_S), False, out, Console(quiet=True), REPO_ROOT, no_wait
    )
    assert compute.simulated == ["gke-c-node-1", "gke-c-node-2"]
    # The VMs are listed once, for the plan it prints and the run alike: a second listing
    # could hit other VMs than the ones it named.
    pools = GCP_PROD.gpu_classes[0].instance_types
    assert len(compute.listed) == len(pools)
    zone = GCP_PROD.zones[0]
    assert report["config"]["target"] == {"nodes": [f"{zone}/gke-c-node-1", f"{zone}/gke-c-node-2"]}
    assert set(report["goodput"]["jobs"]) == {"vision/llama", "language/bert"}


def test_a_cloud_that_fails_the_plan_exits_1_not_as_bad_input(
    compute: type[FakeCompute], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing the targets asks the cloud: its failure is the cloud's (exit 1), as in the run."""
    for vm in compute.vms.values():
        vm["status"] = "TERMINATED"
    result = CliRunner().invoke(app, ["drill", "--cloud-run", "gcp-prod", "--dry-run"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("cloud drill failed: no running Spot VM in node pools")
    assert len(result.output.strip().splitlines()) == 1

    # The Compute API out of reach: nothing listens there.
    monkeypatch.setenv(
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE", f"http://127.0.0.1:{free_port()}/"
    )
    result = CliRunner().invoke(app, ["drill", "--cloud-run", "gcp-prod", "--dry-run"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("cloud drill failed: Compute API projects/")
    assert len(result.output.strip().splitlines()) == 1


def test_an_experiment_that_fails_is_reported_in_one_line() -> None:
    """moto's FIS always completes; a failed experiment comes from botocore's Stubber, which
    checks each request and answer against FIS's service model."""
    from datetime import UTC, datetime

    from botocore.stub import Stubber

    from spotctl.drill.cloud import CloudRunError, FisDrill

    client = boto3.client(
        "fis",
        region_name=PROD.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    pool = f"{PROD.aws.spot_drill.gpu_class}-spot"
    summary = {"id": "EXT1", "tags": {"env": PROD.environment, DRILL_TAG: pool}}
    state = {"status": "failed", "reason": "Target resolution failed"}
    now = datetime.now(UTC)
    with Stubber(client) as stub:
        stub.add_response("list_experiment_templates", {"experimentTemplates": [summary]})
        stub.add_response(
            "start_experiment",
            {"experiment": {"id": "EXP1", "state": {"status": "initiating"}}},
            {"experimentTemplateId": "EXT1"},  # boto3 adds the clientToken after the stub
        )
        stub.add_response(
            "get_experiment",
            {"experiment": {"id": "EXP1", "state": state, "startTime": now, "endTime": now}},
            {"id": "EXP1"},
        )
        with pytest.raises(CloudRunError) as failed:
            drill = FisDrill(PROD, "prod", client)
            drill.run(drill.targets(), no_wait)
        stub.assert_no_pending_responses()
    assert str(failed.value) == "FIS experiment EXP1 ended failed: Target resolution failed"
