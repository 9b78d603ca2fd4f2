"""The runtime under each team's own identity, on both clouds: the stacks' permissions enforced by
the storage API, the checkpoint protocol run with nothing but a team's credentials.

S3: moto's server with IAM enforced, one user per team whose only policy is the team's training
policy from the prod preview (s3_iam). GCS: fake-gcs-server behind the permission layer
(gcs_iam), with the bucket's bindings, the checkpoint role and its IAM Condition from the
gcp-prod preview. A recording proxy sees every request a team makes, and its answer.

The whole protocol runs on each cloud under one team's identity (the two teams differ only in
their prefix), by trainer processes: a first start on an empty prefix and its saves, a
replacement started while that attempt still lives (fenced), a notice (the preemption marker and
the final save), and a last attempt that reads the marker, resumes and finishes, retention
deleting old checkpoints.
The other team trains and resumes, and every team writes an object of several parts. Every
request must pass; the same identity on the other team's prefix, and on the bucket, is refused.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import requests
import torch
from botocore.exceptions import ClientError
from gcs_iam import Binding, BucketPolicy, Check, GcsPermissionLayer, checks_for
from google.api_core.exceptions import Forbidden
from google.cloud import storage
from recording_proxy import RecordingProxy, Request
from s3_iam import PerKeyDeletes, admin_client, client_as, enforce_iam, iam_users
from spotsafe import Run
from spotsafe.errors import StoragePermissionError
from spotsafe.examples.train import TrainConfig, run
from spotsafe.local.servers import free_port, s3_server
from spotsafe.preemption import EXIT_PREEMPTED
from spotsafe.storage import open_store, s3
from spotsafe_harness import result_of, start_trainer, wait_for_step
from stack_files import stack_values

from components.config import load_config

TEAMS = [t.name for t in load_config(stack_values("prod")).teams]
assert [t.name for t in load_config(stack_values("gcp-prod")).teams] == TEAMS
PREFIX = {t.name: t.checkpoint_prefix for t in load_config(stack_values("prod")).teams}
# Long enough that no attempt but the last reaches the end before the test stops it.
STEPS = 100_000
EVERY = 10
COMMITTED = "spotsafe_checkpoint_last_committed_step"
# Answers that are part of the protocol: created, resumable chunk taken, missing (the marker on a
# first start), create-only conflict.
PASSED = {200, 204, 206, 308, 404, 412}
# Notices by signal only: there are no metadata servers to reach here.
QUIET = {"SPOTSAFE_NOTICE_SOURCES": "sigterm"}


@dataclass
class Cloud:
    scheme: str
    bucket: str
    proxy: RecordingProxy
    identity: dict[str, str]  # team -> who the storage API sees
    env: dict[str, dict[str, str]]  # team -> its processes' environment
    server: str  # the storage server itself, behind the proxy

    def uri(self, team: str, run: str) -> str:
        return f"{self.scheme}://{self.bucket}/{PREFIX[team]}/{run}"

    def failures(self, team: str, since: int = 0) -> list[str]:
        """Requests of the team's that were refused or failed, one line each."""
        exchanges = self.proxy.of(self.identity[team])[since:]
        return [str(e) for e in exchanges if e.status not in PASSED]


def _one(resources: list, token: str, name_contains: str = ""):
    (found,) = [r for r in resources if r.type == token and name_contains in r.name]
    return found


@pytest.fixture(scope="module")
def aws(stack_previews) -> Iterator[Cloud]:
    resources = stack_previews("prod")
    bucket = _one(resources, "aws:s3/bucket:Bucket").outputs["bucket"]
    policies = {
        team: json.loads(
            _one(resources, "aws:iam/rolePolicy:RolePolicy", f"-{team}-training-policy").inputs[
                "policy"
            ]
        )
        for team in TEAMS
    }
    with s3_server() as endpoint:
        admin = admin_client(endpoint)
        admin.create_bucket(Bucket=bucket)
        admin.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        keys = iam_users(endpoint, policies)
        enforce_iam(endpoint)
        proxy = PerKeyDeletes(endpoint, keys)
        env = {team: {**keys[team], "AWS_ENDPOINT_URL": proxy.listen(team)} for team in TEAMS}
        yield Cloud("s3", bucket, proxy, {team: team for team in TEAMS}, env, endpoint)
        proxy.close()


@pytest.fixture(scope="module")
def gcp(stack_previews, gcs_endpoint: str) -> Iterator[Cloud]:
    resources = stack_previews("gcp-prod")
    bucket = _one(resources, "gcp:storage/bucket:Bucket").outputs["name"]
    created = requests.post(
        f"{gcs_endpoint}/storage/v1/b", params={"project": "p"}, json={"name": bucket}, timeout=10
    )
    assert created.status_code in (200, 409), created.text
    layer = GcsPermissionLayer(gcs_endpoint, BucketPolicy.from_preview(resources, bucket))
    members = {
        team: _one(
            resources, "gcp:storage/bucketIAMMember:BucketIAMMember", f"{team}-training"
        ).inputs["member"]
        for team in TEAMS
    }
    env = {team: {"STORAGE_EMULATOR_HOST": layer.listen(m)} for team, m in members.items()}
    yield Cloud("gs", bucket, layer, members, env, gcs_endpoint)
    layer.close()


def _trainer(cloud: Cloud, team: str, uri: str, steps: int = STEPS, port: int | None = None):
    args = ["--steps", str(steps), "--every-steps", str(EVERY), "--checkpoint-uri", uri]
    if port is not None:
        args += ["--metrics-port", str(port)]
    return start_trainer(*args, env={**cloud.env[team], **QUIET})


def run_protocol(cloud: Cloud, team: str) -> None:
    """Two attempts as processes, and a last one in this process (as the team already)."""
    uri = cloud.uri(team, f"run-{uuid.uuid4().hex[:6]}")
    ports = [free_port() for _ in range(2)]

    # A first start on an empty prefix (no marker to read) saves, and freezes (SIGSTOP): the
    # pod that would not drain. Its replacement claims the next attempt, restores, saves, and
    # gets a notice: the marker, the final save, exit 75. Thawed, the old attempt is fenced at
    # its next commit.
    first = _trainer(cloud, team, uri, port=ports[0])
    wait_for_step(ports[0], EVERY, first, metric=COMMITTED)
    first.send_signal(signal.SIGSTOP)
    second = _trainer(cloud, team, uri, port=ports[1])
    resumed = wait_for_step(ports[1], EVERY, second, metric="spotsafe_resumed_from_step")
    wait_for_step(ports[1], resumed + EVERY, second, metric=COMMITTED)
    second.send_signal(signal.SIGTERM)
    code, stopped, err = result_of(second)
    assert code == EXIT_PREEMPTED and stopped["durable_at"], err
    first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=600)
    assert first.returncode == 2, err
    assert "superseded by attempt 2" in err or "by another writer meanwhile" in err, err

    # The last attempt reads the marker, resumes from the final save and finishes; retention
    # deletes all but the newest checkpoints of the three attempts.
    final = run(TrainConfig(stopped["final_step"] + 5 * EVERY, uri, EVERY))
    assert final["resumed_from"] == stopped["final_step"]


CLOUDS = {"s3": "aws", "gcs": "gcp"}
# The whole protocol runs under one team per cloud, each team on one cloud (the calls are the
# same for every prefix); the other team trains and resumes in this process.
PROTOCOL = [("s3", TEAMS[0]), ("gcs", TEAMS[-1])]
OTHERS = [("s3", TEAMS[-1]), ("gcs", TEAMS[0])]


@pytest.fixture(params=CLOUDS)
def cloud(request: pytest.FixtureRequest) -> Cloud:
    return request.getfixturevalue(CLOUDS[request.param])


@pytest.fixture
def as_team(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Cloud, str], None]]:
    """Give this process a team's credentials and endpoint, as its pod would have them."""

    def become(cloud: Cloud, team: str) -> None:
        for key, value in {**cloud.env[team], **QUIET}.items():
            monkeypatch.setenv(key, value)
        # The process's one boto3 session keeps the credentials it found first.
        s3._session.cache_clear()

    yield become
    s3._session.cache_clear()


@pytest.mark.parametrize(("cloud", "team"), PROTOCOL, indirect=["cloud"])
def test_the_whole_protocol_passes_under_a_teams_own_identity(cloud: Cloud, team: str, as_team):
    as_team(cloud, team)
    run_protocol(cloud, team)
    requests_made = cloud.proxy.of(cloud.identity[team])
    assert any(e.method == "DELETE" and "step-" in e.path for e in requests_made), "no retention"
    assert not cloud.failures(team), "\n".join(cloud.failures(team))


@pytest.mark.parametrize(("cloud", "team"), OTHERS, indirect=["cloud"])
def test_the_other_team_trains_and_resumes_with_its_own_rights(cloud: Cloud, team: str, as_team):
    as_team(cloud, team)
    since = len(cloud.proxy.of(cloud.identity[team]))
    uri = cloud.uri(team, f"in-process-{uuid.uuid4().hex[:6]}")
    first = run(TrainConfig(3 * EVERY, uri, EVERY))
    resumed = run(TrainConfig(6 * EVERY, uri, EVERY))
    assert (first["resumed_from"], resumed["resumed_from"]) == (None, 3 * EVERY)
    assert not cloud.failures(team, since), "\n".join(cloud.failures(team, since))


@pytest.mark.parametrize("team", TEAMS)
def test_large_objects_go_up_in_parts_with_every_teams_rights(cloud: Cloud, team: str, as_team):
    """Multipart uploads on S3, resumable ones on GCS: real models' state is over one part."""
    as_team(cloud, team)
    since = len(cloud.proxy.of(cloud.identity[team]))
    store = open_store(cloud.uri(team, f"large-{uuid.uuid4().hex[:6]}"))
    big = bytes(range(256)) * (40 * 1024 + 1)  # just over PART_SIZE (8 MiB): two parts
    store.put("step-1/state.pt", big)
    store.put("step-1/state.pt", big)  # an overwrite
    assert store.get("step-1/state.pt") == big
    store.delete(["step-1/state.pt"])
    assert not cloud.failures(team, since), "\n".join(cloud.failures(team, since))


def _other(team: str) -> str:
    return next(t for t in TEAMS if t != team)


def _s3_probes(cloud: Cloud, team: str) -> dict[str, Callable[[], object]]:
    """Calls a team's identity must never get through. Not here: listing another prefix, which
    moto would allow (it ignores the s3:prefix condition; test_checkpoint_access measures it)."""
    client = client_as(cloud.env[team], cloud.env[team]["AWS_ENDPOINT_URL"])
    bucket, theirs, sibling = cloud.bucket, f"{PREFIX[_other(team)]}/run/x", f"{PREFIX[team]}-3d/x"
    return {
        "other team's object: read": lambda: client.get_object(Bucket=bucket, Key=theirs),
        "other team's object: write": lambda: client.put_object(
            Bucket=bucket, Key=theirs, Body=b""
        ),
        "other team's object: delete": lambda: client.delete_object(Bucket=bucket, Key=theirs),
        "sibling prefix: read": lambda: client.get_object(Bucket=bucket, Key=sibling),
        "bucket policy": lambda: client.get_bucket_policy(Bucket=bucket),
        "bucket versioning": lambda: client.get_bucket_versioning(Bucket=bucket),
        "suspend versioning": lambda: client.put_bucket_versioning(
            Bucket=bucket, VersioningConfiguration={"Status": "Suspended"}
        ),
        "object versions": lambda: client.list_object_versions(Bucket=bucket),
        "delete the bucket": lambda: client.delete_bucket(Bucket=bucket),
    }


def _gcs_probes(cloud: Cloud, team: str) -> dict[str, Callable[[], object]]:
    client = storage.Client()
    bucket = client.bucket(cloud.bucket)
    theirs, sibling = bucket.blob(f"{PREFIX[_other(team)]}/run/x"), f"{PREFIX[team]}-3d/x"
    return {
        "other team's prefix: list": lambda: list(
            client.list_blobs(bucket, prefix=f"{PREFIX[_other(team)]}/")
        ),
        "other team's object: read": theirs.download_as_bytes,
        "other team's object: write": lambda: theirs.upload_from_string(b""),
        "other team's object: delete": theirs.delete,
        "sibling prefix: read": bucket.blob(sibling).download_as_bytes,
        "own prefix without its '/': list": lambda: list(
            client.list_blobs(bucket, prefix=PREFIX[team])
        ),
        "whole bucket: list": lambda: list(client.list_blobs(bucket)),
        "bucket metadata": lambda: client.get_bucket(cloud.bucket),
        "bucket IAM policy": bucket.get_iam_policy,
        "bucket labels": lambda: client.bucket(cloud.bucket).patch(),
        "delete the bucket": bucket.delete,
    }


@pytest.mark.parametrize("team", TEAMS)
def test_a_team_is_refused_beyond_its_prefix_and_on_the_bucket(
    cloud: Cloud, team: str, as_team, monkeypatch: pytest.MonkeyPatch
):
    as_team(cloud, team)
    # The client's own background bucket lookup, off as the runtime's store turns it off.
    monkeypatch.setenv("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    since = len(cloud.proxy.of(cloud.identity[team]))
    probes = _s3_probes(cloud, team) if cloud.scheme == "s3" else _gcs_probes(cloud, team)
    allowed = []
    for what, call in probes.items():
        try:
            call()
            allowed.append(what)
        except ClientError as e:
            assert e.response["Error"]["Code"] == "AccessDenied", (what, e.response)
        except Forbidden:
            pass
    assert not allowed, f"{team} on {cloud.scheme} may: {allowed}"
    statuses = [e.status for e in cloud.proxy.of(cloud.identity[team])[since:]]
    assert statuses == [403] * len(probes), statuses


def test_a_team_that_cannot_read_its_own_prefix_is_named_in_one_line(
    gcp: Cloud, monkeypatch: pytest.MonkeyPatch
):
    """The harness's bad input: a role that lost storage.objects.get. The first start already
    reads (the preemption marker); it stops with the permission and the caller named."""
    team, layer = TEAMS[0], gcp.proxy
    member = gcp.identity[team]
    crippled = [
        Binding(b.permissions - {"storage.objects.get"}, b.condition)
        for b in layer.policy.bindings[member]
    ]
    broken = GcsPermissionLayer(gcp.server, BucketPolicy(gcp.bucket, {member: crippled}))
    for key, value in {"STORAGE_EMULATOR_HOST": broken.listen(member), **QUIET}.items():
        monkeypatch.setenv(key, value)
    uri = gcp.uri(team, f"locked-{uuid.uuid4().hex[:6]}")
    with (
        pytest.raises(StoragePermissionError) as refused,
        Run(uri, {"model": torch.nn.Linear(1, 1)}),
    ):
        pass
    broken.close()
    message = str(refused.value)
    assert "\n" not in message
    assert f"{uri.removeprefix('gs://')}/preempted.json" in message
    assert f"{member.removeprefix('serviceAccount:')} lacks storage.objects.get" in message


def _request(method: str, path: str, body: dict | None = None) -> Request:
    content = json.dumps(body).encode() if body else b""
    return Request(method, path, {"content-type": "application/json"}, content)


def test_the_layer_asks_for_the_permissions_googles_table_names():
    """cloud.google.com/storage/docs/access-control/iam-json, and objects/insert: overwriting an
    object also needs storage.objects.delete; create-only (ifGenerationMatch=0) never does."""
    b, o = "/storage/v1/b/bkt", "/storage/v1/b/bkt/o"
    cases = {
        ("GET", b): [Check("storage.buckets.get", "bkt")],
        ("GET", f"{b}/iam"): [Check("storage.buckets.getIamPolicy", "bkt")],
        ("DELETE", b): [Check("storage.buckets.delete", "bkt")],
        ("GET", f"{o}?prefix=t%2Fv%2F"): [Check("storage.objects.list", "bkt", list_prefix="t/v/")],
        ("GET", o): [Check("storage.objects.list", "bkt", list_prefix="")],
        ("GET", f"{o}/t%2Fv%2Fx"): [Check("storage.objects.get", "bkt", "t/v/x")],
        ("GET", f"/download{o}/t%2Fv%2Fx?alt=media"): [
            Check("storage.objects.get", "bkt", "t/v/x")
        ],
        ("DELETE", f"{o}/t%2Fv%2Fx"): [Check("storage.objects.delete", "bkt", "t/v/x")],
        ("POST", f"/upload{o}?uploadType=resumable&ifGenerationMatch=0"): [
            Check("storage.objects.create", "bkt", "t/v/new")
        ],
        ("POST", f"/upload{o}?uploadType=resumable"): [
            Check("storage.objects.create", "bkt", "t/v/new"),
            Check("storage.objects.delete", "bkt", "t/v/new"),
        ],
    }
    for (method, path), expected in cases.items():
        request = _request(method, path, {"name": "t/v/new"} if method == "POST" else None)
        assert checks_for(request, object_exists=lambda bucket, name: True) == expected, path
    assert checks_for(_request("POST", f"{o}/x/compose"), lambda b, n: False) is None
    assert Check("storage.objects.get", "bkt", "t/v/x").resource == (
        "projects/_/buckets/bkt/objects/t/v/x"
    )
