"""`spotctl preflight` on GCP: each check's pass and fail against a loopback fake of each Google
API it calls (the REST paths and JSON shapes of Resource Manager v3, Service Usage v1, GKE v1
serverConfig, Compute v1 acceleratorTypes, Cloud Quotas v1, Org Policy v2 getEffectivePolicy,
Cloud Identity v1 groups:lookup), reached through the real client with Application Default
Credentials (google-auth refreshes a workforce login's token at the fake's token endpoint). A
refused call is one cannot-check row; a missing project or missing credentials one line; and
nothing but GET reaches an API."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from json_http import JsonHandler
from stack_files import stack_values

from components.config import load_config
from spotctl.preflight import gcp
from spotctl.preflight.google_api import GoogleApi
from spotctl.preflight.rows import CANNOT_CHECK, FAIL, PASS, PreflightError, run_checks

PROD = load_config(stack_values("gcp-prod"))
DEV = load_config(stack_values("gcp-dev"))
PROJECT = PROD.gcp.project


class FakeGoogle:
    """One loopback server for every API: `/<api>/<path>` answers what `routes` holds for it
    (404 NOT_FOUND otherwise); POST only at /token (the OAuth token endpoint)."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, dict]] = {}
        self.requests: list[tuple[str, str, dict]] = []
        fake = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                fake.requests.append(("GET", url.path, parse_qs(url.query)))
                assert self.headers["Authorization"] == "Bearer fake-token"
                status, body = fake.routes.get(
                    url.path, (404, error(404, "NOT_FOUND", f"{url.path} not found"))
                )
                self.send_json(status, body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                self.rfile.read(length)
                fake.requests.append(("POST", self.path, {}))
                if self.path == "/token":
                    self.send_json(200, {"access_token": "fake-token", "expires_in": 3600})
                else:
                    self.send_json(405, error(405, "METHOD_NOT_ALLOWED", "read-only fake"))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.root = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def route(self, api: str, path: str, body: dict, status: int = 200) -> FakeGoogle:
        self.routes[f"/{api}/{path}"] = (status, body)
        return self

    def writes(self) -> list:
        return [r for r in self.requests if r[0] != "GET" and r[1] != "/token"]


def error(code: int, status: str, message: str) -> dict:
    return {"error": {"code": code, "status": status, "message": message}}


@pytest.fixture
def google(tmp_path, monkeypatch):
    fake = FakeGoogle()
    credentials = tmp_path / "adc.json"
    credentials.write_text(
        json.dumps(
            {
                # A workforce identity's login, as `gcloud auth application-default login`
                # writes it: its token endpoint is named in the file, here the fake's.
                "type": "external_account_authorized_user",
                "audience": "//iam.googleapis.com/locations/global/workforcePools/p/providers/o",
                "client_id": "client",
                "client_secret": "secret",
                "refresh_token": "refresh",
                "token_url": f"{fake.root}/token",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
    yield fake
    assert fake.writes() == []
    fake.server.shutdown()


def run(check: str, fake: FakeGoogle, settings=PROD, stack: str = "gcp-prod"):
    api = GoogleApi.with_default_credentials(settings.gcp.project, root=fake.root)
    (found,) = [c for c in gcp.checks(settings, stack, api) if c.name == check]
    return run_checks([found], gcp.refused)


# --- the project


def test_an_active_project_passes(google):
    google.route(
        "cloudresourcemanager", f"v3/projects/{PROJECT}", {"state": "ACTIVE", "name": "projects/42"}
    )
    (row,) = run("project", google)
    assert row.status == PASS


def test_a_project_being_deleted_fails(google):
    google.route("cloudresourcemanager", f"v3/projects/{PROJECT}", {"state": "DELETE_REQUESTED"})
    (row,) = run("project", google)
    assert row.status == FAIL and row.fix.startswith(f"gcloud projects undelete {PROJECT}")


def test_a_wrong_project_is_one_line(google):
    google.route(
        "cloudresourcemanager",
        f"v3/projects/{PROJECT}",
        error(403, "PERMISSION_DENIED", "denied"),
        403,
    )
    with pytest.raises(PreflightError) as caught:
        run("project", google)
    assert str(caught.value).startswith(
        f"project {PROJECT!r} does not exist or these credentials cannot see it (403 "
    )


def test_missing_credentials_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "none.json"))
    with pytest.raises(PreflightError) as caught:
        GoogleApi.with_default_credentials(PROJECT)
    assert str(caught.value).startswith("no Google credentials: `gcloud auth application-default")


# --- APIs


def services(*names: str) -> dict:
    return {"services": [{"config": {"name": n}, "state": "ENABLED"} for n in names]}


def test_apis_pass_when_those_the_stack_needs_first_are_on(google):
    google.route("serviceusage", f"v1/projects/{PROJECT}/services", services(*gcp.APIS_BEFORE_UP))
    (row,) = run("apis", google)
    assert row.status == PASS
    assert google.requests[-1][2] == {"filter": ["state:ENABLED"], "pageSize": ["200"]}


def test_apis_fail_when_service_usage_is_off(google):
    google.route(
        "serviceusage",
        f"v1/projects/{PROJECT}/services",
        error(403, "PERMISSION_DENIED", "Service Usage API has not been used (SERVICE_DISABLED)"),
        403,
    )
    (row,) = run("apis", google)
    assert row.status == FAIL
    assert row.fix == (
        "gcloud services enable serviceusage.googleapis.com storage.googleapis.com "
        f"cloudkms.googleapis.com --project {PROJECT}"
    )


# --- the minor in the release channel


def server_config(*versions: str) -> dict:
    return {"channels": [{"channel": "REGULAR", "validVersions": list(versions)}]}


@pytest.mark.parametrize(
    ("versions", "status"),
    [(("1.35.2-gke.1000", "1.34.9-gke.2000"), PASS), (("1.34.9-gke.2000", "1.33.5-gke.1"), FAIL)],
)
def test_the_minor_passes_only_where_its_channel_offers_it(google, versions, status):
    path = f"v1/projects/{PROJECT}/locations/{PROD.region}/serverConfig"
    google.route("container", path, server_config(*versions))
    (row,) = run("gke-version", google)
    assert row.status == status
    if status == FAIL:
        assert row.fix.startswith("set gcp.cluster.create.version to one of ['1.33', '1.34']")


@pytest.mark.parametrize(
    ("running", "status"), [("1.35.1-gke.1200000", PASS), ("1.34.6-gke.1100000", FAIL)]
)
def test_an_attached_cluster_passes_only_if_it_runs_the_version_its_stack_says(
    google, running, status
):
    """gcp-dev says its attached cluster runs 1.35: that decides the shutdown grace it asks for."""
    name = DEV.gcp.cluster.existing.name
    path = f"v1/projects/{DEV.gcp.project}/locations/{DEV.region}/clusters/{name}"
    google.route("container", path, {"name": name, "currentNodeVersion": running})
    (row,) = run("gke-version", google, DEV, "gcp-dev")
    assert row.status == status
    if status == FAIL:
        assert (
            row.fix
            == f"set gcp.cluster.existing.version to {running} in stacks/Pulumi.gcp-dev.yaml"
        )


# --- accelerators per zone


def accelerator(zone: str, name: str) -> tuple[str, str, dict]:
    path = f"compute/v1/projects/{PROJECT}/zones/{zone}/acceleratorTypes/{name}"
    return "compute", path, {"name": name, "zone": zone}


def test_accelerators_pass_where_every_zone_offers_them_and_fail_where_one_does_not(google):
    for gpu_class in PROD.gpu_classes:
        for zone in gpu_class.pool_zones(PROD.zones):
            name = "nvidia-l4" if "g2" in gpu_class.instance_types[0] else "nvidia-h100-80gb"
            if (name, zone) != ("nvidia-h100-80gb", "us-central1-c"):
                google.route(*accelerator(zone, name))
    l4, h100 = run("accelerators", google)
    assert l4.status == PASS
    assert h100.status == FAIL and h100.detail == (
        "nvidia-h100-80gb is not offered in ['us-central1-c']"
    )


# --- quotas and open preferences


def quota_info(quota_id: str, value: int, region: str | None) -> dict:
    dimensions = {"region": region} if region else {}
    return {
        "quotaId": quota_id,
        "dimensionsInfos": [{"dimensions": dimensions, "details": {"value": str(value)}}],
    }


def quota_route(fake, quota_id, value, region):
    path = (
        f"v1/projects/{DEV.gcp.project}/locations/global/services/compute.googleapis.com/"
        f"quotaInfos/{quota_id}"
    )
    fake.route("cloudquotas", path, quota_info(quota_id, value, region))


def preferences(fake, *open_ones: tuple[str, str | None, int]) -> None:
    fake.route(
        "cloudquotas",
        f"v1/projects/{DEV.gcp.project}/locations/global/quotaPreferences",
        {
            "quotaPreferences": [
                {
                    "quotaId": q,
                    "dimensions": {"region": r} if r else {},
                    "quotaConfig": {"preferredValue": str(v)},
                    "reconciling": True,
                }
                for q, r, v in open_ones
            ]
        },
    )


L4_SPOT = "PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region"


def test_quotas_pass_with_enough_or_an_open_preference_and_fail_without_either(google):
    """gcp-dev files no preferences (gcp.spot_gpu_quota is empty): it needs 4 Spot L4s in
    europe-west4, 6 GPUs and 120 vCPUs over all regions."""
    preferences(google, ("GPUS-ALL-REGIONS-per-project", None, 8))
    quota_route(google, L4_SPOT, 0, DEV.region)
    quota_route(google, "GPUS-ALL-REGIONS-per-project", 1, None)
    quota_route(google, "CPUS-ALL-REGIONS-per-project", 500, None)
    rows = {r.check: r for r in run("quotas", google, DEV, "gcp-dev")}
    assert rows["quota CPUS-ALL-REGIONS-per-project"].status == PASS
    gpus = rows["quota GPUS-ALL-REGIONS-per-project"]
    assert gpus.status == PASS and "a preference for 8 is open" in gpus.detail
    spot = rows[f"quota {L4_SPOT}"]
    assert spot.status == FAIL and spot.detail.startswith("0 of 4 in europe-west4")
    assert (
        "--quota-id=PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region --preferred-value=4" in spot.fix
    )


# --- org policy and the RBAC group


def effective(rules: list[dict]) -> dict:
    return {"name": "gcp.resourceLocations", "spec": {"rules": rules}}


@pytest.mark.parametrize(
    ("rules", "status"),
    [
        ([], PASS),
        ([{"values": {"allowedValues": ["in:us-locations"]}}], PASS),
        ([{"values": {"allowedValues": ["in:europe-locations"]}}], FAIL),
        ([{"values": {"deniedValues": ["in:us-central1-locations"]}}], FAIL),
    ],
)
def test_the_resource_locations_policy_must_allow_the_region(google, rules, status):
    path = f"v2/projects/{PROJECT}/policies/gcp.resourceLocations:getEffectivePolicy"
    google.route("orgpolicy", path, effective(rules))
    (row,) = run("org-policy", google)
    assert row.status == status


@pytest.mark.parametrize(("exists", "status"), [(True, PASS), (False, FAIL)])
def test_the_rbac_group_must_exist(google, exists, status):
    if exists:
        google.route("cloudidentity", "v1/groups:lookup", {"name": "groups/01abc"})
    (row,) = run("rbac-group", google)
    assert row.status == status
    assert google.requests[-1][2] == {"groupKey.id": ["gke-security-groups@example.com"]}


# --- refusals


def test_a_denied_call_is_one_cannot_check_row(google):
    path = f"v2/projects/{PROJECT}/policies/gcp.resourceLocations:getEffectivePolicy"
    google.route("orgpolicy", path, error(403, "PERMISSION_DENIED", "no orgpolicy.policy.get"), 403)
    (row,) = run("org-policy", google)
    assert row.status == CANNOT_CHECK
    assert row.detail == (
        f"GET orgpolicy.googleapis.com/{path} denied (PERMISSION_DENIED): grant it to run this "
        "check"
    )
