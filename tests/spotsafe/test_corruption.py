"""A damaged newest checkpoint: resume falls back to the previous valid one, reports and counts
the damage, never loads it, and ends bitwise-identical to an uninterrupted run."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import urlparse

import boto3
import pytest
from prometheus_client import REGISTRY
from spotsafe import Checkpointer
from spotsafe.errors import ManifestFormatError
from spotsafe.examples.train import TrainConfig, run
from spotsafe_harness import run_trainer, s3_keys


def _train(uri: str, steps: int) -> dict:
    ckpt = Checkpointer(uri, every_steps=10, async_save=False)
    return run(TrainConfig(steps, uri, seed=5), checkpointer=ckpt)


def _object(uri: str, key: str):
    parsed = urlparse(uri)
    return boto3.resource("s3").Object(parsed.netloc, f"{parsed.path.strip('/')}/{key}")


def _corrupted(data: bytes) -> bytes:
    return data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]


DAMAGE = {
    "flipped byte": (lambda o: o.put(Body=_corrupted(o.get()["Body"].read())), "checksum"),
    "truncated": (lambda o: o.put(Body=o.get()["Body"].read()[:-10]), "truncated"),
    "missing": (lambda o: o.delete(), "missing"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_newest_checkpoint_falls_back_to_previous(
    s3_uri: str, tmp_path, damage: str
) -> None:
    reference = _train(f"file://{tmp_path}/reference", 40)
    assert _train(s3_uri, 30)["final_step"] == 30
    state_key = next(k for k in s3_keys(s3_uri) if k.startswith("step-30/") and "state" in k)
    harm, reason = DAMAGE[damage]
    harm(_object(s3_uri, state_key))
    corrupt_before = REGISTRY.get_sample_value("spotsafe_checkpoint_corrupt_skipped_total")

    resumed = _train(s3_uri, 40)

    assert resumed["resumed_from"] == 20
    assert [s["step"] for s in resumed["skipped"]] == [30]
    assert reason in resumed["skipped"][0]["reason"]
    assert REGISTRY.get_sample_value("spotsafe_checkpoint_corrupt_skipped_total") == (
        corrupt_before + 1
    )
    assert resumed["weights_sha256"] == reference["weights_sha256"]
    # The rejected step 30 was replaced by the resumed run's own, valid one.
    manifest = json.loads(_object(s3_uri, "step-30/manifest.json").get()["Body"].read())
    assert manifest["attempt"] == 2


def test_unreadable_manifest_is_skipped(s3_uri: str) -> None:
    _train(s3_uri, 20)
    _object(s3_uri, "step-20/manifest.json").put(Body=b"{not json")
    assert _train(s3_uri, 20)["resumed_from"] == 10


def test_newer_manifest_format_is_refused_with_a_clear_error(s3_uri: str) -> None:
    _train(s3_uri, 20)
    manifest = _object(s3_uri, "step-20/manifest.json")
    raw = json.loads(manifest.get()["Body"].read())
    manifest.put(Body=json.dumps({**raw, "format_version": 99}).encode())
    with pytest.raises(ManifestFormatError, match="format version 99.*upgrade spotsafe"):
        _train(s3_uri, 30)
    rc, result, err = run_trainer("--steps", "30", "--checkpoint-uri", s3_uri)
    assert (rc, result) == (2, None)
    assert "format version 99" in err and "Traceback" not in err
    # Refusing lost nothing: both checkpoints are still there.
    assert {"step-10/manifest.json", "step-20/manifest.json"} <= set(s3_keys(s3_uri))


def _as_format_1(uri: str, step: int, digest=lambda data: hashlib.sha256(data).hexdigest()) -> None:
    """Rewrite a manifest as format 1 wrote it: a sha256 per object, no crc32c."""
    manifest = _object(uri, f"step-{step}/manifest.json")
    raw = json.loads(manifest.get()["Body"].read())
    for entry in raw["objects"]:
        del entry["crc32c"]
        entry["sha256"] = digest(_object(uri, f"step-{step}/{entry['key']}").get()["Body"].read())
    manifest.put(Body=json.dumps({**raw, "format_version": 1}).encode())


def test_format_1_manifests_are_still_read_and_verified(s3_uri: str, tmp_path) -> None:
    reference = _train(f"file://{tmp_path}/reference", 40)
    _train(s3_uri, 30)
    assert (
        json.loads(_object(s3_uri, "step-30/manifest.json").get()["Body"].read())["format_version"]
        == 2
    )
    _as_format_1(s3_uri, 20)
    _as_format_1(s3_uri, 30, digest=lambda data: hashlib.sha256(data + b"x").hexdigest())

    resumed = _train(s3_uri, 40)
    assert resumed["resumed_from"] == 20  # step 30's sha256 does not match: skipped
    assert [s["step"] for s in resumed["skipped"]] == [30]
    assert "sha256" in resumed["skipped"][0]["reason"]
    assert resumed["weights_sha256"] == reference["weights_sha256"]
