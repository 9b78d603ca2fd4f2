"""A user's mistakes end in one clear message naming what is wrong, never a traceback, and
lose nothing already committed."""

from __future__ import annotations

import boto3
import pytest
import torch
from spotsafe import Checkpointer, Extras
from spotsafe.errors import ConfigError, InvalidURIError, StateMismatchError, exit_on_error
from spotsafe.local.servers import LOCAL_AWS_ENV, s3_server
from spotsafe.storage import open_store
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
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    # small: 32 -> 64 -> 64 -> 1; medium: 256 -> 2048 -> 2048 -> 2048 -> 1
    assert "entry 'model' does not fit the Sequential to restore into: " in line
    assert "only the model has ['8.weight', '8.bias']; shapes differ: " in line
    assert "0.weight [64, 32] in the checkpoint, [2048, 256] in the model" in line, line
    assert line.endswith("restore into the model the run was saved with")
    assert "Traceback" not in err and "Missing key" not in err
    assert "step-10/manifest.json" in s3_keys(s3_uri)


def test_a_changed_model_names_the_entries_that_differ(tmp_path) -> None:
    uri = f"file://{tmp_path}"
    saved = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    Checkpointer(uri, async_save=False).save(1, {"model": saved})
    changed = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU())
    differs = (
        r"only the checkpoint has \['1.weight', '1.bias'\]; shapes differ: "
        r"0.weight \[8, 4\] in the checkpoint, \[16, 4\] in the model, "
        r"0.bias \[8\] in the checkpoint, \[16\] in the model; restore into the model"
    )
    with pytest.raises(StateMismatchError, match=differs) as refused:
        Checkpointer(uri).restore({"model": changed})
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("uri", "bucket"),
    [
        ("s3://My_Bucket/run", "My_Bucket"),
        ("s3://ab/run", "ab"),
        ("s3://bucket..name/run", "bucket..name"),
        ("gs://-bucket/run", "-bucket"),
        ("gs://" + "a" * 64 + "/run", "a" * 64),
    ],
)
def test_an_invalid_bucket_name_is_refused_before_any_request(uri: str, bucket: str) -> None:
    # No endpoint is needed: the name is checked against the service's rules, never retried.
    with pytest.raises(InvalidURIError, match=f"names bucket '{bucket}', which is not a valid"):
        open_store(uri)


def test_exit_on_error_prints_one_line_whatever_the_message_holds(capsys) -> None:
    with pytest.raises(SystemExit) as exited, exit_on_error():
        raise StateMismatchError("Error(s) in loading state_dict:\n\tMissing key(s): 'w'.")
    assert exited.value.code == 2
    one_line = "error: Error(s) in loading state_dict: Missing key(s): 'w'.\n"
    assert capsys.readouterr().err == one_line


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
        stranger = {**user, "AWS_ACCESS_KEY_ID": "AKIAUNKNOWNKEY000000"}
        rc_unknown, _, err_unknown = run_trainer(
            "--steps", "5", "--checkpoint-uri", "s3://locked-bucket/run", env=stranger
        )
    assert (rc, result) == (2, None)
    assert "permission denied" in err and "s3://locked-bucket/run/" in err
    assert "Traceback" not in err
    # A key the service does not know is another fix than a missing grant.
    assert rc_unknown == 2
    assert "the access key is unknown or its secret is wrong" in err_unknown, err_unknown
    assert "permission denied" not in err_unknown and "Traceback" not in err_unknown
