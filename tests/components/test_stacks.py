"""Every stack under stacks/ previews cleanly, with a sound resource tree."""

from __future__ import annotations

import json
import subprocess

import pytest
from stack_files import REPO_ROOT, SPOTCTL, STACKS, stack_values

from spotctl.preview.resources import STACK_TYPE, preview_program, resource_tree


def test_repository_has_dev_and_prod_stacks():
    assert {"dev", "prod"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_previews_without_deprecations(stack_preview, stack):
    preview = stack_preview(stack)
    types = {r.type for r in preview.resources}
    assert STACK_TYPE in types
    pools_and_bucket = {
        "aws": {"aws:eks/nodeGroup:NodeGroup", "aws:s3/bucket:Bucket"},
        "gcp": {"gcp:container/nodePool:NodePool", "gcp:storage/bucket:Bucket"},
    }
    assert pools_and_bucket[stack_values(stack)["cloud"]] <= types


@pytest.mark.parametrize("stack", STACKS)
def test_tree_is_rooted_and_every_cloud_resource_sits_in_a_component(stack_preview, stack):
    preview = stack_preview(stack)
    roots = [r for r in preview.resources if r.parent is None]
    assert [r.type for r in roots] == [STACK_TYPE]
    for resource in preview.resources:
        if resource.parent is not None:
            assert resource.parent in preview.by_urn, f"{resource.urn}: parent not registered"
        if resource.type.startswith(("aws:", "gcp:")):
            parent = preview.by_urn[resource.parent]
            assert parent.type.startswith("spot:"), f"{resource.name} is not inside a component"
            assert not parent.custom


@pytest.mark.parametrize("stack", STACKS)
def test_children_are_named_after_their_component(stack_preview, stack):
    preview = stack_preview(stack)
    for resource in preview.resources:
        parent = preview.by_urn.get(resource.parent or "")
        if parent is not None and parent.type.startswith("spot:"):
            assert resource.name == parent.name or resource.name.startswith(f"{parent.name}-")


def test_names_are_stable_between_previews(prod):
    def aws_urns(resources):
        return sorted(r.urn for r in resources if r.type.startswith("aws:"))

    assert aws_urns(preview_program(REPO_ROOT, "prod")) == aws_urns(prod.resources)


def test_inputs_use_engine_names(prod):
    group = prod.one("aws:eks/nodeGroup:NodeGroup", "stable")
    assert {"capacityType", "instanceTypes", "scalingConfig", "subnetIds"} <= set(group.inputs)
    assert "capacity_type" not in group.inputs


def test_mock_outputs_look_like_aws(prod):
    bucket = prod.one("aws:s3/bucket:Bucket")
    assert bucket.outputs["arn"] == f"arn:aws:s3:::{bucket.outputs['bucket']}"
    queue = prod.one("aws:sqs/queue:Queue")
    assert queue.outputs["url"].startswith("https://sqs.us-west-2.amazonaws.com/")
    subnets = prod.of_type("aws:ec2/subnet:Subnet")
    assert all(s.outputs["arn"].startswith("arn:aws:ec2:us-west-2:") for s in subnets)


def test_cli_prints_tree_and_writes_json(tmp_path):
    out = tmp_path / "dev.json"
    result = subprocess.run(
        [SPOTCTL, "preview", "--stack", "dev", "--json", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "pulumi:pulumi:Stack" in result.stdout
    assert "└─ " in result.stdout and "Resources:" in result.stdout
    assert result.stdout.startswith(f"Previewing stack 'dev' of {REPO_ROOT}\n")
    # What the program logs is shown, as `pulumi preview` shows it.
    assert "\nDiagnostics:\n    warning: kubernetes.templates.image is the placeholder" in (
        result.stdout
    )
    document = json.loads(out.read_text())
    assert document["resources"]
    for resource in document["resources"]:
        assert set(resource) == {"urn", "type", "name", "parent", "dependencies", "inputs"}
    by_name = {(r["type"], r["name"]): r for r in document["resources"]}
    assert ("aws:s3/bucket:Bucket", "dev-checkpoints-bucket") in by_name
    # What each resource waits for: its parent, the outputs it consumes, its depends_on.
    versioning = by_name[("aws:s3/bucketVersioning:BucketVersioning", "dev-checkpoints-versioning")]
    bucket = by_name[("aws:s3/bucket:Bucket", "dev-checkpoints-bucket")]
    assert {bucket["urn"], versioning["parent"]} <= set(versioning["dependencies"])
    lifecycle = by_name[
        (
            "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
            "dev-checkpoints-lifecycle",
        )
    ]
    assert versioning["urn"] in lifecycle["dependencies"]  # an explicit depends_on


def test_cli_previews_the_project_it_is_run_in(tmp_path):
    """Run from a checkout's subfolder it previews that checkout, never the installed package's."""
    inside = REPO_ROOT / "stacks"
    result = subprocess.run(
        [SPOTCTL, "preview", "--stack", "dev"], capture_output=True, text=True, cwd=inside
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"Previewing stack 'dev' of {REPO_ROOT}"
    nowhere = subprocess.run(
        [SPOTCTL, "preview", "--stack", "dev"], capture_output=True, text=True, cwd=tmp_path
    )
    assert nowhere.returncode == 2
    assert f"no Pulumi.yaml in {tmp_path} or any folder above it" in nowhere.stderr


def test_resource_tree_nests_children_under_parents(prod):
    lines = resource_tree(prod.resources).splitlines()
    bucket_line = next(i for i, line in enumerate(lines) if "aws:s3/bucket:Bucket " in line)
    component_line = next(
        i for i, line in enumerate(lines) if "spot:storage:CheckpointBucket" in line
    )
    assert component_line < bucket_line
    assert lines[bucket_line].index("aws:s3") > lines[component_line].index("spot:storage")
