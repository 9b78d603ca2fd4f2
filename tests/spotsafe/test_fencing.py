"""Fencing: a stale attempt still saving overwrites nothing, and the newest lineage wins."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import urlparse

import boto3
import pytest
import torch
from spotsafe import Checkpointer, Extras
from spotsafe.errors import ConfigError, SupersededError
from spotsafe.manifest import Manifest, ObjectEntry, manifest_key
from spotsafe_harness import run_trainer, s3_keys, start_trainer


def _extras(value: float) -> dict:
    return {"extras": Extras(w=torch.full((4,), value))}


def test_superseded_writer_can_neither_commit_nor_delete(s3_uri: str) -> None:
    old = Checkpointer(s3_uri, keep_last=2, async_save=False)
    for step in (10, 20):
        old.save(step, _extras(step))
    new = Checkpointer(s3_uri, keep_last=2, async_save=False)
    assert new.attempt == old.attempt + 1
    state = _extras(0)
    assert new.restore(state) == 20

    # The zombie's next save would also make retention delete step 10: it must do neither.
    with pytest.raises(SupersededError, match=f"superseded by attempt {new.attempt}"):
        old.save(30, _extras(30))
    keys = s3_keys(s3_uri)
    assert "step-30/manifest.json" not in keys
    assert "step-10/manifest.json" in keys

    new.save(30, _extras(31))
    fresh = _extras(0)
    assert Checkpointer(s3_uri).restore(fresh) == 30
    assert fresh["extras"]["w"][0] == 31


def test_a_reader_fences_no_one(s3_uri: str) -> None:
    writer = Checkpointer(s3_uri, async_save=False)
    writer.save(10, _extras(10))
    reader = Checkpointer(s3_uri, read_only=True)
    assert reader.restore(_extras(0)) == 10
    writer.save(20, _extras(20))  # still the newest attempt: the reader claimed none
    with pytest.raises(ConfigError, match="read_only"):
        reader.save(30, _extras(30))
    assert Checkpointer(s3_uri, read_only=True).restore(_extras(0)) == 20


def test_commit_of_a_stale_lineage_that_slipped_through_is_ignored(s3_uri: str) -> None:
    """Between its fence check and its commit a zombie may still land a manifest; resume then
    prefers the newer attempt's lineage, even at a lower step."""
    old = Checkpointer(s3_uri, async_save=False)
    old.save(10, _extras(10))
    new = Checkpointer(s3_uri, async_save=False)
    new.restore(_extras(0))
    new.save(20, _extras(20))
    parsed = urlparse(s3_uri)
    prefix = parsed.path.strip("/")
    boto3.client("s3").put_object(
        Bucket=parsed.netloc, Key=f"{prefix}/{manifest_key(30)}",
        Body=Manifest(30, old.attempt, 1, "torch", [ObjectEntry("x", 1, "0")]).to_json(),
    )  # fmt: skip

    reader = Checkpointer(s3_uri, read_only=True)
    state = _extras(0)
    assert reader.restore(state) == 20
    assert state["extras"]["w"][0] == 20
    assert [(s.step, s.reason) for s in reader.skipped] == [
        (30, f"written by superseded attempt {old.attempt}")
    ]


def test_two_trainer_processes_at_once_newest_lineage_wins(s3_uri: str, proxy, tmp_path) -> None:
    args = ["--steps", "40", "--every-steps", "10", "--seed", "9"]
    rc, reference, err = run_trainer(*args, "--checkpoint-uri", f"file://{tmp_path}/ref")
    assert rc == 0, err
    # The stale attempt talks through the proxy, which holds its first upload mid-stream while
    # its replacement (talking directly) runs; then the stale one's upload goes on.
    proxy.chunk_delay_s = 0.05
    stale = start_trainer(*args, "--checkpoint-uri", s3_uri, env={"AWS_ENDPOINT_URL": proxy.url})
    deadline = time.monotonic() + 60
    while not any(re.search(r"PUT .*state\.pt", r) for r in list(proxy.requests)):
        assert time.monotonic() < deadline and stale.poll() is None
        time.sleep(0.002)
    proxy.flowing.clear()

    rc, newest, err = run_trainer(*args, "--checkpoint-uri", s3_uri)
    assert rc == 0, err
    assert newest["weights_sha256"] == reference["weights_sha256"]
    proxy.flowing.set()
    out, err = stale.communicate(timeout=60)
    assert stale.returncode == 2, err
    assert "superseded by attempt 2" in err and "Traceback" not in err

    # Everything committed belongs to the newest attempt, and it is what a restart resumes.
    for key in (k for k in s3_keys(s3_uri) if k.endswith("manifest.json")):
        parsed = urlparse(s3_uri)
        body = (
            boto3.client("s3")
            .get_object(Bucket=parsed.netloc, Key=f"{parsed.path.strip('/')}/{key}")["Body"]
            .read()
        )
        assert json.loads(body)["attempt"] == 2, key
    rc, again, err = run_trainer(*args, "--checkpoint-uri", s3_uri)
    assert (again["resumed_from"], again["weights_sha256"]) == (40, reference["weights_sha256"])
