"""The object-store layer against real local servers: S3 API (moto), GCS API, local files."""

from __future__ import annotations

import time
import tracemalloc
import uuid
from urllib.parse import urlparse

import boto3
import pytest
from spotsafe import checksum
from spotsafe.errors import (
    BucketNotFoundError,
    InvalidURIError,
    ObjectMissingError,
    StorageError,
    StorageUnreachableError,
)
from spotsafe.storage import open_store
from spotsafe.storage.parts import PART_SIZE, Written
from spotsafe.storage.s3 import PARTS_IN_FLIGHT
from spotsafe_harness import TcpProxy

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


def test_put_reports_the_size_and_crc32c_it_stored(uri: str) -> None:
    store = open_store(uri)
    assert store.put("step-1/big.bin", BIG) == Written(len(BIG), checksum.crc32c(BIG))
    assert store.put("step-1/empty.bin", b"") == Written(0, checksum.crc32c(b""))
    assert store.get("step-1/empty.bin") == b""


def test_s3_keeps_the_full_object_crc32c_of_a_multipart_object(s3_uri: str) -> None:
    """The checksum S3 validated and keeps for the whole object is the one a manifest records
    (the local server carries it over the parts, as S3 does)."""
    written = open_store(s3_uri).put("step-1/big.bin", BIG)
    bucket, prefix = urlparse(s3_uri).netloc, urlparse(s3_uri).path.strip("/")
    head = boto3.client("s3").head_object(
        Bucket=bucket, Key=f"{prefix}/step-1/big.bin", ChecksumMode="ENABLED"
    )
    assert (head["ChecksumCRC32C"], head["ChecksumType"]) == (written.crc32c, "FULL_OBJECT")


def test_a_write_that_fails_midway_stores_nothing(uri: str) -> None:
    store = open_store(uri)
    with pytest.raises(RuntimeError, match="serialiser failed"), store.writer("step-1/x") as out:
        out.write(BIG)  # several parts are on their way already
        raise RuntimeError("serialiser failed")
    assert store.list("step-") == []
    if uri.startswith("s3://"):  # and no unfinished multipart upload is left behind
        bucket = urlparse(uri).netloc
        assert "Uploads" not in boto3.client("s3").list_multipart_uploads(Bucket=bucket)


def test_every_s3_request_carries_the_crc32c_s3_checks(
    s3_uri: str, proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    store = open_store(s3_uri)
    store.put("step-1/big.bin", BIG)  # 20 MiB: parts of 8, 8 and 4 MiB
    parts = [BIG[i : i + PART_SIZE] for i in range(0, len(BIG), PART_SIZE)]
    # One per part, checked as it arrives, then the whole object's, checked on completion.
    assert sorted(proxy.crc32c_headers) == sorted(
        [checksum.crc32c(p) for p in parts] + [checksum.crc32c(BIG)]
    )
    proxy.crc32c_headers.clear()
    store.put("step-1/small.bin", b"x" * 1000)
    assert proxy.crc32c_headers == [checksum.crc32c(b"x" * 1000)]


def test_a_write_holds_a_bounded_number_of_parts_in_memory(s3_uri: str) -> None:
    store = open_store(s3_uri)
    piece = bytes(1 << 20)
    tracemalloc.start()
    try:
        with store.writer("step-1/state.pt") as out:
            for _ in range(96):  # 96 MiB, written the way torch.save writes: piece by piece
                out.write(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.written.size == 96 << 20
    assert peak < (PARTS_IN_FLIGHT + 2) * PART_SIZE, f"peak {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("size", [100_000, len(BIG)], ids=["one-request", "resumable"])
def test_gcs_refuses_an_upload_whose_bytes_were_changed_in_transit(
    gcs_endpoint: str, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    from google.cloud import storage

    proxy = TcpProxy(gcs_endpoint)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    storage.Client().create_bucket(bucket)
    store = open_store(f"gs://{bucket}/run")
    proxy.corrupt_next_body()
    with pytest.raises(StorageError, match="refused, its checksum does not match"):
        store.put("step-1/state.pt", BIG[:size])
    assert not proxy._corrupt_pending, "no body was corrupted"
    assert store.list("step-") == []
    proxy.close()
