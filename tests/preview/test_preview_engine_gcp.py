"""The mock engine on pulumi-gcp programs: outputs in Google's formats, per provider project and
region, data sources answered, and resources it does not model still previewed."""

from __future__ import annotations

import re
import textwrap

from gcp_programs import tiny_program
from previewed import Preview

from spotctl.preview.gcp import project_number
from spotctl.preview.resources import preview_program

PROGRAM = """
import pulumi, pulumi_gcp as gcp

west = gcp.Provider("west", project="team-west", region="europe-west4")
in_west = pulumi.ResourceOptions(provider=west)
vpc = gcp.compute.Network("vpc", auto_create_subnetworks=False, opts=in_west)
gcp.compute.Subnetwork("nodes", network=vpc.id, ip_cidr_range="10.10.0.0/20", opts=in_west)
account = gcp.serviceaccount.Account("trainer", account_id="trainer-sa", opts=in_west)
bucket = gcp.storage.Bucket("ckpt", location="US", opts=in_west)
in_west_invoke = pulumi.InvokeOutputOptions(provider=west)
agent = gcp.storage.get_project_service_account_output(opts=in_west_invoke)
project = gcp.organizations.get_project_output(opts=in_west_invoke)
gcp.pubsub.Topic("events", labels={"agent": agent.email_address.apply(lambda e: e.split("@")[0]),
                                   "number": project.number}, opts=in_west)
gcp.kms.KeyRing("default-provider", location="us-central1")
gcp.cloudscheduler.Job("nightly", name="nightly", schedule="0 19 * * *",
                       http_target={"uri": "https://example.com/run"}, opts=in_west)
"""
CONFIG = "config:\n  gcp:project: stack-project\n  gcp:region: us-east1\n"


def preview(tmp_path) -> Preview:
    program = tiny_program(tmp_path, textwrap.dedent(PROGRAM))
    (program / "Pulumi.test.yaml").write_text(CONFIG)
    return Preview("test", preview_program(program, "test", strict_deprecations=True))


def test_outputs_follow_the_providers_project_and_region(tmp_path):
    resources = preview(tmp_path)
    vpc = resources.one("gcp:compute/network:Network")
    assert re.fullmatch(r"projects/team-west/global/networks/vpc-[0-9a-f]{7}", vpc.id)
    assert vpc.outputs["selfLink"] == f"https://www.googleapis.com/compute/v1/{vpc.id}"
    subnet = resources.one("gcp:compute/subnetwork:Subnetwork")
    assert subnet.id.startswith("projects/team-west/regions/europe-west4/subnetworks/nodes-")
    assert subnet.outputs["gatewayAddress"] == "10.10.0.1"
    account = resources.one("gcp:serviceaccount/account:Account")
    email = "trainer-sa@team-west.iam.gserviceaccount.com"
    assert account.outputs["email"] == email
    assert account.outputs["member"] == f"serviceAccount:{email}"
    assert account.id == account.outputs["name"] == f"projects/team-west/serviceAccounts/{email}"
    assert re.fullmatch(r"[1-9]\d{20}", account.outputs["uniqueId"])
    bucket = resources.one("gcp:storage/bucket:Bucket")
    assert bucket.outputs["url"] == f"gs://{bucket.id}"
    assert bucket.outputs["projectNumber"] == project_number("team-west")


def test_scheduler_jobs_live_in_the_providers_region_and_start_enabled(tmp_path):
    job = preview(tmp_path).one("gcp:cloudscheduler/job:Job")
    assert job.id == "projects/team-west/locations/europe-west4/jobs/nightly"
    assert job.outputs["region"] == "europe-west4" and job.outputs["project"] == "team-west"
    assert job.outputs["state"] == "ENABLED" and job.outputs["paused"] is False


def test_data_sources_answer_with_the_same_project_number(tmp_path):
    topic = preview(tmp_path).one("gcp:pubsub/topic:Topic")
    number = project_number("team-west")
    assert re.fullmatch(r"[1-9]\d{11}", number)
    assert topic.inputs["labels"] == {"agent": f"service-{number}", "number": number}


def test_a_resource_it_does_not_model_still_gets_an_id_and_the_stack_config_applies(tmp_path):
    resources = preview(tmp_path)
    assert resources.one("gcp:pubsub/topic:Topic").id
    ring = resources.one("gcp:kms/keyRing:KeyRing")
    assert ring.id.startswith("projects/stack-project/locations/us-central1/keyRings/")
