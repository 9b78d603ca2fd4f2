"""A user's mistakes end in one clear message naming what is wrong, never a traceback, and
lose nothing already committed."""

from __future__ import annotations

import boto3
import pytest
import torch
from spotsafe import Checkpointer, Extras
from spotsafe.errors import ConfigError, StateMismatchError
from spotsafe.local_servers import LOCAL_AWS_ENV, s3_server
from spotsafe_harness import run_trainer, s3_keys


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("s3://no-such-bucket/run", "bucket 'no-such-bucket' does not exist at http://"),
        ("s3:/bucket/run", "names no bucket"),
        ("https://bucket/run", "is not supported"),
    ],
)
def test_cli_names_the_mistake(aws_env: str, uri: str, message: str) -> None:
    rc, result, err = run_trainer("--steps", "5", "--checkpoint-uri", uri)
    assert (rc, result) == (2, None)
    assert message in err and "Traceback" not in err


def test_cli_names_an_unreachable_endpoint(aws_env: str, proxy) -> None:
    proxy.down()
    rc, _, err = run_trainer(
        "--steps", "5", "--checkpoint-uri", "s3://bucket/run", env={"AWS_ENDPOINT_URL": proxy.url}
    )
    assert rc == 2
    assert f"S3 endpoint {proxy.url} did not answer" in err and "Traceback" not in err


def test_state_that_does_not_fit_the_model_is_refused(s3_uri: str) -> None:
    rc, _, err = run_trainer("--steps", "10", "--checkpoint-uri", s3_uri)
    assert rc == 0, err
    rc, result, err = run_trainer("--steps", "20", "--size", "medium", "--checkpoint-uri", s3_uri)
    assert (rc, result) == (2, None)
    assert "entry 'model' does not fit" in err and "size mismatch" in err
    assert "Traceback" not in err
    assert "step-10/manifest.json" in s3_keys(s3_uri)


def test_state_with_other_entries_is_refused(tmp_path) -> None:
    uri = f"file://{tmp_path}"
    Checkpointer(uri, async_save=False).save(1, {"a": Extras(x=1)})
    only = r"only the checkpoint has \['a'\], only the state has \['b'\]"
    with pytest.raises(StateMismatchError, match=only):
        Checkpointer(uri).restore({"b": Extras()})


def test_plain_values_in_state_are_refused_with_the_fix(tmp_path) -> None:
    fix = r"state\['lr'\] is a float.*state\['lr'\] = spotsafe.Extras\(lr=value\)"
    with pytest.raises(ConfigError, match=fix):
        Checkpointer(f"file://{tmp_path}").save(1, {"lr": 0.1, "w": Extras(t=torch.ones(1))})


def test_a_generator_in_the_state_is_saved_and_restored(tmp_path) -> None:
    uri = f"file://{tmp_path}"
    generator = torch.Generator().manual_seed(3)
    torch.rand(5, generator=generator)
    Checkpointer(uri, async_save=False).save(1, {"g": generator})
    expected = torch.rand(5, generator=generator)
    fresh = torch.Generator().manual_seed(99)
    assert Checkpointer(uri).restore({"g": fresh}) == 1
    assert torch.equal(torch.rand(5, generator=fresh), expected)


def test_a_generator_inside_extras_is_refused_with_the_fix(tmp_path) -> None:
    state = {"extras": Extras(g=torch.Generator())}
    with pytest.raises(ConfigError, match=r"extras/g.*put the generator in the state itself"):
        Checkpointer(f"file://{tmp_path}").save(1, state)


def test_unknown_option_is_refused(tmp_path) -> None:
    with pytest.raises(ConfigError, match="keep_latest"):
        Checkpointer(f"file://{tmp_path}", keep_latest=3)


def test_cli_names_a_missing_permission(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server of its own that enforces IAM after the setup's three calls; the trainer then
    runs as a user no policy allows anything."""
    monkeypatch.setenv("INITIAL_NO_AUTH_ACTION_COUNT", "3")
    for key, value in LOCAL_AWS_ENV.items():
        monkeypatch.setenv(key, value)
    with s3_server() as endpoint:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        boto3.client("s3").create_bucket(Bucket="locked-bucket")
        iam = boto3.client("iam")
        iam.create_user(UserName="no-rights")
        key = iam.create_access_key(UserName="no-rights")["AccessKey"]
        user = {
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
        }
        rc, result, err = run_trainer(
            "--steps", "5", "--checkpoint-uri", "s3://locked-bucket/run", env=user
        )
    assert (rc, result) == (2, None)
    assert "permission denied" in err and "s3://locked-bucket/run/" in err
    assert "Traceback" not in err
