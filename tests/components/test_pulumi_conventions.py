"""A Pulumi user's habits with the stack config: secrets set with `pulumi config set --secret
[--path]` (the layout in the stack file and what the CLI hands the program: Pulumi's "Secrets"
and "Configuration" docs), ESC `environment:` imports, and the region and project in the
providers' own keys (`aws:region`, `gcp:project`, `gcp:region`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from stack_files import REPO_ROOT

from components.config import ConfigError, load_values
from components.config.document import SECRET
from components.config.files import ProgramInputError, load_project, program_config, stack_config

PROJECT = "spot-training"
WEBHOOK = "https://hooks.chat.example/services/T0/B0/plaintext-token"
# What `pulumi config set --secret` writes: ciphertext under `secure:`.
CIPHERTEXT = {"secure": "v1:5wGfOTLkbGmv1HOG:Ynp8oW+ExnA5rJ2PJnSg2Xx5u0mEZcA="}


def stack_file(tmp_path: Path, stack: str, **changes) -> Path:
    """The repository's stack file with `changes` (full key -> value) over its config."""
    document = yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    document["config"].update(changes)
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def loaded(path: Path):
    values, secret_keys = stack_config(path, PROJECT)
    return load_values(values, PROJECT, secret_keys)


def alerts(stack: str = "dev") -> dict:
    document = yaml.safe_load((REPO_ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return dict(document["config"][f"{PROJECT}:alerts"])


def test_a_nested_secret_set_the_pulumi_way_is_an_opaque_placeholder_offline(tmp_path):
    """`pulumi config set --secret --path alerts.webhook_url ...` nests `secure:` in the key's
    value; the CLI marks the whole key secret. Offline it cannot be decrypted: a placeholder."""
    path = stack_file(
        tmp_path, "dev", **{f"{PROJECT}:alerts": {**alerts(), "webhook_url": CIPHERTEXT}}
    )
    values, secret_keys = stack_config(path, PROJECT)
    assert secret_keys == [f"{PROJECT}:alerts"]
    assert CIPHERTEXT["secure"] not in json.dumps(values)
    assert loaded(path).alerts.webhook_url == SECRET


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        (
            {f"{PROJECT}:alerts": {**alerts(), "emails": [CIPHERTEXT]}},
            "spot-training:alerts.emails[0]: stored encrypted (`secure:`), but the platform writes "
            "this field in plain text",
        ),
        (
            {f"{PROJECT}:cost_tags": CIPHERTEXT},
            "spot-training:cost_tags: stored encrypted (`secure:`)",
        ),
        (
            {f"{PROJECT}:alerts": {**alerts(), "runbook_base_url": CIPHERTEXT}},
            "spot-training:alerts.runbook_base_url: stored encrypted",
        ),
    ],
)
def test_a_secret_in_a_field_that_is_no_credential_is_refused_naming_it(
    tmp_path, changes, complaint
):
    """Such a value would reach names, tags and settings in plain text at `pulumi up`."""
    with pytest.raises(ConfigError) as caught:
        loaded(stack_file(tmp_path, "dev", **changes))
    assert complaint in str(caught.value)
    assert "only alerts.webhook_url may be secret" in str(caught.value)


def test_at_pulumi_up_a_secret_key_holding_no_credential_is_refused():
    """At `pulumi up` the CLI hands the program plaintext and the names of the secret keys only:
    a secret key that holds no credential field is refused, never published."""
    project = load_project(REPO_ROOT)
    values, _ = program_config(REPO_ROOT, project, "dev")
    with pytest.raises(ConfigError, match=r"spot-training:cost_tags: stored encrypted"):
        load_values(values, PROJECT, [f"{PROJECT}:cost_tags"])
    # A credential's key, and a provider's own secret, load.
    assert load_values(values, PROJECT, [f"{PROJECT}:alerts", "aws:secretKey"])


def test_an_esc_environment_import_is_refused_offline_saying_how(tmp_path):
    path = stack_file(tmp_path, "dev")
    path.write_text("environment:\n  - platform/prod-alerts\n" + path.read_text())
    with pytest.raises(ProgramInputError) as caught:
        stack_config(path, PROJECT)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and message.startswith(str(path))
    assert "imports Pulumi ESC environment(s) platform/prod-alerts" in message
    assert "`pulumi config set`" in message


def test_region_and_project_are_read_from_the_providers_keys(tmp_path):
    aws_stack = stack_file(tmp_path, "dev", **{"aws:region": "eu-west-1"})
    aws_stack.write_text(aws_stack.read_text().replace("us-east-1", "eu-west-1"))
    assert loaded(aws_stack).region == "eu-west-1"
    gcp = loaded(stack_file(tmp_path, "gcp-dev", **{"gcp:project": "ml-west"}))
    assert (gcp.region, gcp.gcp.project) == ("europe-west4", "ml-west")


@pytest.mark.parametrize(
    ("stack", "changes", "complaint"),
    [
        (
            "dev",
            {f"{PROJECT}:region": "us-east-1", "aws:region": "eu-west-1"},
            "spot-training:region: 'us-east-1' conflicts with aws:region 'eu-west-1': set it "
            "once, in aws:region",
        ),
        (
            "gcp-dev",
            {f"{PROJECT}:region": "europe-west1"},
            "spot-training:region: 'europe-west1' conflicts with gcp:region 'europe-west4'",
        ),
    ],
)
def test_a_project_key_that_contradicts_the_providers_is_refused_naming_both(
    tmp_path, stack, changes, complaint
):
    """Once previewed clean while the providers used the other region: a silent wrong answer."""
    with pytest.raises(ConfigError) as caught:
        loaded(stack_file(tmp_path, stack, **changes))
    assert complaint in str(caught.value)


def test_a_gcp_project_that_contradicts_gcp_project_is_refused(tmp_path):
    document = yaml.safe_load((REPO_ROOT / "stacks" / "Pulumi.gcp-dev.yaml").read_text())
    section = {**document["config"][f"{PROJECT}:gcp"], "project": "other-project"}
    with pytest.raises(
        ConfigError,
        match=r"spot-training:gcp.project: 'other-project' conflicts "
        r"with gcp:project 'spot-training-dev'",
    ):
        loaded(stack_file(tmp_path, "gcp-dev", **{f"{PROJECT}:gcp": section}))


def test_the_project_disables_every_default_provider():
    """So that no resource lands in a default region or project (the preview engine refuses a
    resource that names no provider, as the Pulumi engine does)."""
    values, _ = program_config(REPO_ROOT, load_project(REPO_ROOT), "dev")
    assert json.loads(values["pulumi:disable-default-providers"]) == ["*"]


def engine(tmp_path: Path, stack: str, config: dict, secret_keys: list) -> dict:
    """The program run on the mock engine with the config as `pulumi up` hands it over:
    decrypted values, and the keys that were secret."""
    request = {
        "program_dir": str(REPO_ROOT),
        "main": str(REPO_ROOT),
        "project": PROJECT,
        "stack": stack,
        "config": config,
        "secret_keys": secret_keys,
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    out = tmp_path / "out.json"
    subprocess.run(
        [sys.executable, "-m", "spotctl.preview.engine", str(tmp_path / "request.json"), str(out)],
        check=False,
        timeout=600,
    )
    return json.loads(out.read_text())


def concealed(value, path):
    """`value` with what lies at `path` replaced by the secret marker."""
    *parents, last = path
    for key in parents:
        value = value[key]
    value[last] = SECRET


def test_at_pulumi_up_the_webhook_reaches_alertmanager_as_a_secret_and_nowhere_in_plain(tmp_path):
    """From the stack file (a nested `secure:` value, decrypted by the CLI) to the resource: the
    engine receives the webhook URL marked secret, and no input or output holds it in plain
    text (outputs are what the state keeps)."""
    config, _ = program_config(REPO_ROOT, load_project(REPO_ROOT), "dev")
    config[f"{PROJECT}:alerts"] = json.dumps({**alerts(), "webhook_url": WEBHOOK})
    result = engine(tmp_path, "dev", config, [f"{PROJECT}:alerts"])
    assert "resources" in result, result.get("error")
    (release,) = [r for r in result["resources"] if r["name"].endswith("-monitoring-release")]
    receivers = release["inputs"]["values"]["alertmanager"]["config"]["receivers"]
    index = next(i for i, r in enumerate(receivers) if "webhook_configs" in r)
    url = ["values", "alertmanager", "config", "receivers", index, "webhook_configs", 0, "url"]
    assert url in release["secrets"]
    for resource in result["resources"]:
        for path in resource["secrets"]:
            concealed(resource["inputs"], path)
        assert WEBHOOK not in json.dumps(resource), resource["urn"]
    shown = release["outputs"]
    for key in url:
        shown = shown[key]
    assert shown == SECRET
