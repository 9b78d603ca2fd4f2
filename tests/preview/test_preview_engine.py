"""The preview harness on small programs of its own: config, isolation, errors, mock outputs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from stack_files import REPO_ROOT, spotctl_preview

from spotctl.preview.resources import UNKNOWN, PreviewError, preview_program, resource_tree

PROJECT = "name: tiny\nruntime: python\nstackConfigDir: env\n"
CONFIG = """
config:
  aws:region: eu-west-1
  tiny:size: 3
  tiny:flags: {versioned: true, zones: [a, b]}
  tiny:token:
    secure: v1:AAAABBBB
"""


def _program(root: Path, main: str, project: str = PROJECT, config: str = CONFIG) -> Path:
    (root / "env").mkdir(parents=True, exist_ok=True)
    (root / "Pulumi.yaml").write_text(project)
    (root / "env" / "Pulumi.test.yaml").write_text(config)
    (root / "__main__.py").write_text(textwrap.dedent(main))
    return root


def test_config_reaches_the_program_as_the_cli_passes_it(tmp_path):
    program = _program(
        tmp_path,
        """
        import pulumi, pulumi_aws as aws
        config = pulumi.Config()
        flags = config.require_object("flags")
        aws.sqs.Queue("q", tags={
            "size": str(config.require_int("size") + 1),
            "zones": ",".join(flags["zones"]),
            "versioned": str(flags["versioned"]),
            "token_secret": str(config.require_secret("token") is not None),
        })
        """,
    )
    (queue,) = [r for r in preview_program(program, "test") if r.type == "aws:sqs/queue:Queue"]
    assert queue.inputs["tags"] == {
        "size": "4",
        "zones": "a,b",
        "versioned": "True",
        "token_secret": "True",
    }
    assert queue.outputs["url"].startswith("https://sqs.eu-west-1.amazonaws.com/")
    assert queue.outputs["arn"].startswith("arn:aws:sqs:eu-west-1:")
    assert queue.id == queue.outputs["url"]


def test_project_config_defaults_apply_unless_the_stack_overrides_them(tmp_path):
    project = PROJECT + "config:\n  size: 1\n  label:\n    type: string\n    default: blue\n"
    program = _program(
        tmp_path,
        """
        import pulumi, pulumi_aws as aws
        config = pulumi.Config()
        aws.sqs.Queue("q", tags={"size": config.require("size"), "label": config.require("label")})
        """,
        project=project,
    )
    (queue,) = [r for r in preview_program(program, "test") if r.type == "aws:sqs/queue:Queue"]
    assert queue.inputs["tags"] == {"size": "3", "label": "blue"}


def test_the_program_imports_its_own_components(tmp_path):
    """A program previewed from another directory (`--program ../other-checkout`) runs with its
    own `components` package first on the path, as `pulumi preview` run there would, not the
    copy spotctl is installed from."""
    program = _program(
        tmp_path,
        """
        import components, pulumi_aws as aws
        aws.sqs.Queue("q", tags={"components": components.__file__})
        """,
    )
    (program / "components").mkdir()
    (program / "components" / "__init__.py").write_text("")
    (queue,) = [r for r in preview_program(program, "test") if r.type == "aws:sqs/queue:Queue"]
    assert queue.inputs["tags"] == {"components": str(program.resolve() / "components/__init__.py")}


def test_explicit_provider_region_shapes_outputs_and_is_recorded(tmp_path):
    program = _program(
        tmp_path,
        """
        import pulumi, pulumi_aws as aws
        provider = aws.Provider("west", region="us-west-2")
        aws.sns.Topic("t", opts=pulumi.ResourceOptions(provider=provider))
        """,
    )
    resources = preview_program(program, "test")
    provider = next(r for r in resources if r.type == "pulumi:providers:aws")
    topic = next(r for r in resources if r.type == "aws:sns/topic:Topic")
    assert topic.provider == f"{provider.urn}::{provider.id}"
    assert topic.outputs["arn"].startswith("arn:aws:sns:us-west-2:")


def test_strict_mode_catches_deprecated_resources(tmp_path):
    program = _program(
        tmp_path,
        """
        import pulumi_aws as aws
        aws.s3.BucketV2("legacy")
        """,
    )
    assert [r.type for r in preview_program(program, "test")][-1] == "aws:s3/bucketV2:BucketV2"
    with pytest.raises(PreviewError, match="BucketV2 is deprecated"):
        preview_program(program, "test", strict_deprecations=True)


def test_strict_mode_catches_deprecated_properties(tmp_path):
    program = _program(
        tmp_path,
        """
        import pulumi_aws as aws
        aws.s3.Bucket("b", aws.s3.BucketArgs(acl="private"))
        """,
    )
    assert preview_program(program, "test")
    with pytest.raises(PreviewError) as caught:
        preview_program(program, "test", strict_deprecations=True)
    assert str(caught.value) == (
        "uses deprecated pulumi-aws API: acl is deprecated. Use the s3.BucketAcl resource instead."
    )
    assert not caught.value.crashed


def test_run_error_is_a_clean_message_and_a_crash_keeps_its_traceback(tmp_path):
    program = _program(tmp_path / "clean", "import pulumi\nraise pulumi.RunError('bad size')\n")
    with pytest.raises(PreviewError) as caught:
        preview_program(program, "test")
    assert str(caught.value) == "bad size" and not caught.value.crashed

    program = _program(tmp_path / "crash", "import pulumi\n{}['missing']\n")
    with pytest.raises(PreviewError) as caught:
        preview_program(program, "test")
    assert caught.value.crashed and "KeyError: 'missing'" in str(caught.value)


def test_logged_error_fails_the_preview(tmp_path):
    program = _program(tmp_path, "import pulumi\npulumi.log.error('quota exceeded')\n")
    with pytest.raises(PreviewError, match="quota exceeded"):
        preview_program(program, "test")


def test_missing_project_file_and_stack(tmp_path):
    with pytest.raises(PreviewError, match="no Pulumi.yaml"):
        preview_program(tmp_path, "test")
    program = _program(tmp_path, "import pulumi\n")
    with pytest.raises(PreviewError, match=r"no stack 'prod' .*\(stacks there: test\)"):
        preview_program(program, "prod")


def test_unknown_outputs_are_shown_as_unknown_in_tree_json_and_policy_inputs(tmp_path):
    """An output the engine only knows after deploy, fed into another resource (here a log
    group's key into a parameter), is previewed as unknown, as `pulumi preview` does."""
    program = _program(
        tmp_path / "program",
        """
        import pulumi_aws as aws
        group = aws.cloudwatch.LogGroup("lg")
        aws.ssm.Parameter("p", type="String", value=group.kms_key_id)
        """,
    )
    resources = preview_program(program, "test")
    (parameter,) = [r for r in resources if r.type == "aws:ssm/parameter:Parameter"]
    assert parameter.inputs["value"] == UNKNOWN
    assert "aws:ssm/parameter:Parameter p: value = output<unknown>" in resource_tree(resources)

    out = tmp_path / "plan.json"
    result = spotctl_preview(
        program, "test", "--json", str(out), "--policy-pack", str(REPO_ROOT / "policies")
    )
    assert result.returncode == 0, result.stdout + result.stderr
    written = {r["name"]: r for r in json.loads(out.read_text())["resources"]}
    assert written["p"]["inputs"]["value"] == UNKNOWN
    assert "Policies: spot-training-regime" in result.stdout


def test_yaml_syntax_error_in_the_project_file_is_one_line(tmp_path):
    program = _program(tmp_path, "import pulumi\n", project="name: [tiny\nruntime: python\n")
    with pytest.raises(PreviewError) as caught:
        preview_program(program, "test")
    assert str(caught.value) == (
        f"{program / 'Pulumi.yaml'}:2:8: not valid YAML: expected ',' or ']', but got ':'"
    )
    assert not caught.value.crashed and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        (PROJECT + "config: [size]\n", "'config' must be a mapping"),
        (PROJECT + "config:\n  1: size\n", "config key 1 is not a string; quote it"),
        (
            "name: tiny\nruntime: python\nstackConfigDir: [env]\n",
            "'stackConfigDir' must be a folder path (a string)",
        ),
    ],
)
def test_a_malformed_project_file_is_one_line(tmp_path, project, expected):
    """Pulumi.yaml's `config:` maps keys to values and `stackConfigDir` is a path (Pulumi project
    file reference): anything else is refused naming the file, as in a stack file."""
    program = _program(tmp_path, "import pulumi\n", project=project)
    with pytest.raises(PreviewError) as caught:
        preview_program(program, "test")
    assert str(caught.value) == f"{program / 'Pulumi.yaml'}: {expected}"
    assert not caught.value.crashed


def test_a_resource_without_an_explicit_provider_is_an_error(tmp_path):
    """As the engine does with `pulumi:disable-default-providers` (Pulumi.yaml's or the stack's
    config): a resource or call of a disabled package that names no provider fails the preview."""
    project = PROJECT + 'config:\n  pulumi:disable-default-providers:\n    value: ["*"]\n'
    program = _program(
        tmp_path,
        """
        import pulumi, pulumi_aws as aws
        provider = aws.Provider("west", region="us-west-2")
        aws.sns.Topic("named", opts=pulumi.ResourceOptions(provider=provider))
        aws.sns.Topic("defaulted")
        """,
        project=project,
    )
    with pytest.raises(PreviewError) as caught:
        preview_program(program, "test")
    assert str(caught.value) == (
        "Default provider for 'aws' disabled. 'urn:pulumi:test::tiny::aws:sns/topic:Topic::"
        "defaulted' must use an explicit provider."
    )
    (program / "__main__.py").write_text("import pulumi_aws as aws\naws.get_caller_identity()\n")
    with pytest.raises(
        PreviewError,
        match="Default provider for 'aws' disabled. "
        "'aws:index/getCallerIdentity:getCallerIdentity' must use",
    ):
        preview_program(program, "test")
