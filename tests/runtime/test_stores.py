"""The object-store layer against real local servers: S3 API (moto), GCS API, local files."""

from __future__ import annotations

import time

import pytest
from spotsafe.errors import (
    BucketNotFoundError,
    InvalidURIError,
    ObjectMissingError,
    StorageUnreachableError,
)
from spotsafe.storage import open_store

BIG = bytes(range(256)) * (80 * 1024)  # 20 MiB: multipart on S3


@pytest.fixture(params=["s3", "gcs", "file"])
def uri(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/run"
    return request.getfixturevalue(f"{request.param}_uri")


def test_put_get_list_delete_round_trip(uri: str) -> None:
    store = open_store(uri)
    store.put("step-1/a/big.bin", BIG)
    store.put("step-1/a/small.bin", b"x")
    assert store.get("step-1/a/big.bin") == BIG
    assert {(o.key, o.size) for o in store.list("step-1/")} == {
        ("step-1/a/big.bin", len(BIG)),
        ("step-1/a/small.bin", 1),
    }
    store.delete(["step-1/a/big.bin", "step-1/never-written"])
    assert [o.key for o in store.list("step-")] == ["step-1/a/small.bin"]
    with pytest.raises(ObjectMissingError, match="big.bin"):
        store.get("step-1/a/big.bin")


def test_create_only_put_never_overwrites(uri: str) -> None:
    store = open_store(uri)
    assert store.put_if_absent("step-2/manifest.json", b"first")
    assert not store.put_if_absent("step-2/manifest.json", b"second")
    assert store.get("step-2/manifest.json") == b"first"


@pytest.mark.parametrize(
    "bad",
    ["s3://", "s3:/bucket/run", "gs:///run", "ftp://bucket/run", "file://relative/run", "bucket"],
)
def test_malformed_uri_is_named(bad: str) -> None:
    with pytest.raises(InvalidURIError, match="expected|absolute") as e:
        open_store(bad)
    assert repr(bad) in str(e.value)


def test_missing_s3_bucket_is_named(aws_env: str) -> None:
    with pytest.raises(BucketNotFoundError, match="'no-such-bucket' does not exist"):
        open_store("s3://no-such-bucket/run").list()


def test_missing_gcs_bucket_is_named(gcs_uri: str) -> None:
    with pytest.raises(BucketNotFoundError, match="'no-such-bucket' does not exist"):
        open_store("gs://no-such-bucket/run").list()


def test_unreachable_endpoint_fails_after_bounded_retries_naming_it(
    aws_env: str, monkeypatch: pytest.MonkeyPatch, proxy
) -> None:
    proxy.down()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    started = time.monotonic()
    with pytest.raises(StorageUnreachableError, match=f"{proxy.url}.*after 3 attempts"):
        open_store("s3://bucket/run", max_attempts=3).list()
    assert time.monotonic() - started < 30
