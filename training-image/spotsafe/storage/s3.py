"""The S3 API through boto3. Uploads stream through PartWriter as multipart uploads with
CRC32C checksums; s3transfer does downloads; botocore retries every request, and spotsafe
those whose answers botocore cannot read (see ``retries``).

The endpoint comes from AWS_ENDPOINT_URL when set (boto3 honours it), so the same code talks to
AWS, to S3-compatible stores and to the local moto server.
"""

from __future__ import annotations

import functools
import io
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from spotsafe import checksum
from spotsafe.errors import (
    BucketNotFoundError,
    ObjectMissingError,
    SpotsafeError,
    StorageError,
    StoragePermissionError,
    StorageUnreachableError,
)
from spotsafe.storage import retries
from spotsafe.storage.interface import ObjectInfo
from spotsafe.storage.parts import MiB, PartStore, PartWriter, Written, part_size_for
from spotsafe.storage.private_random import isolate_botocore

log = logging.getLogger(__name__)

# Downloads in 16 MiB ranges, 8 at a time (fewer requests to reassemble), as measured by
# spotsafe.bench. Uploads go through PartWriter (see _S3Upload).
DOWNLOAD = TransferConfig(
    multipart_threshold=16 * MiB, multipart_chunksize=16 * MiB, max_concurrency=8
)
# Parts sent at once. More do not upload faster on a 2-core node, and each costs a part buffer.
PARTS_IN_FLIGHT = 4
_DENIED = {"AccessDenied", "403", "Forbidden"}
_UNKNOWN_KEY = {"InvalidAccessKeyId", "SignatureDoesNotMatch"}  # who, not what, is refused
_MISSING = {"NoSuchKey", "404", "NotFound"}
_CONFLICT = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
T = TypeVar("T")


def _answered(e: Exception) -> bool:
    """botocore's own errors: the service's answer, or a failure botocore retried already."""
    return isinstance(e, (BotoCoreError, ClientError))


def _refuse_unframed(response_dict: dict, **_) -> None:
    retries.refuse_unframed(response_dict["status_code"], response_dict["headers"])


class _S3Upload:
    """One object: a single PutObject, or a multipart upload whose full-object CRC32C S3
    checks when it completes; every part carries its own CRC32C too, checked on arrival."""

    def __init__(self, store: S3Store, key: str) -> None:
        self.store = store
        self.key = key
        self.where = dict(Bucket=store.bucket, Key=store.prefix + key)
        self.upload_id = ""

    def whole(self, data: bytearray, written: Written) -> None:
        put = functools.partial(
            self.store.client.put_object, **self.where, Body=data, ChecksumCRC32C=written.crc32c
        )
        self.store._request("upload", self.key, put)

    def start(self) -> None:
        # A retry after a lost answer starts a second upload; the bucket's lifecycle rule
        # aborts the first.
        create = functools.partial(
            self.store.client.create_multipart_upload,
            **self.where, ChecksumAlgorithm="CRC32C", ChecksumType="FULL_OBJECT",
        )  # fmt: skip
        self.upload_id = self.store._request("upload", self.key, lambda: create()["UploadId"])

    def part(self, number: int, data: bytearray, crc: int) -> dict:
        value = checksum.encode(crc)
        send = functools.partial(
            self.store.client.upload_part,
            **self.where, UploadId=self.upload_id, PartNumber=number, Body=data,
            ChecksumCRC32C=value,
        )  # fmt: skip
        etag = self.store._request("upload", self.key, lambda: send()["ETag"])
        return {"PartNumber": number, "ETag": etag, "ChecksumCRC32C": value}

    def complete(self, parts: list[dict], written: Written) -> None:
        # A retry after a lost answer completes the upload again: moto answers as the first
        # time; should S3 answer NoSuchUpload instead, the save fails with one line.
        complete = functools.partial(
            self.store.client.complete_multipart_upload,
            **self.where, UploadId=self.upload_id, MultipartUpload={"Parts": parts},
            ChecksumCRC32C=written.crc32c, ChecksumType="FULL_OBJECT",
        )  # fmt: skip
        self.store._request("upload", self.key, complete)

    def abort(self) -> None:
        try:
            self.store.client.abort_multipart_upload(**self.where, UploadId=self.upload_id)
        except Exception as e:  # noqa: BLE001 - the bucket's lifecycle rule cleans up
            log.warning("could not abort the upload of %s: %s", self.key, e)


@functools.cache
def _session() -> boto3.session.Session:
    """One per process: a client made from it reuses the service model it has loaded, which
    otherwise costs every new Checkpointer (a resume, a reader) a noticeable fraction of a
    second. Its retries leave the global RNG alone."""
    isolate_botocore()
    return boto3.session.Session()


class S3Store(PartStore):
    def __init__(
        self, uri: str, bucket: str, prefix: str, max_attempts: int, connect_timeout_s: float
    ) -> None:
        self.uri = uri
        self.bucket = bucket
        self.prefix = f"{prefix}/" if prefix else ""
        self.max_attempts = max_attempts
        config = Config(
            retries={"total_max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=connect_timeout_s,
            read_timeout=60,
            max_pool_connections=16,
            # Uploads carry the CRC32C spotsafe computes once and S3 checks; the SDK adds no
            # checksum of its own, nor a SHA-256 of every body for the signature (the CRC32C
            # already guards the bytes; TLS, the connection).
            request_checksum_calculation="when_required",
            s3={"payload_signing_enabled": False},
        )
        self.client = _session().client("s3", config=config)
        self.client.meta.events.register("before-parse.s3", _refuse_unframed)
        retries.quiet_cut_headers()
        self.endpoint = self.client.meta.endpoint_url
        self.pool = ThreadPoolExecutor(PARTS_IN_FLIGHT, "spotsafe-part")

    def _request(self, action: str, key: str, request: Callable[[], T]) -> T:
        """One request: tried again while its answer cannot be read, its failure one line."""
        with self._translated(action, key):
            return retries.call(request, self.max_attempts, _answered)

    @contextmanager
    def _translated(self, action: str, key: str = "") -> Iterator[None]:
        where = f"s3://{self.bucket}/{self.prefix}{key}"
        try:
            yield
        except SpotsafeError:
            raise
        except ClientError as e:
            raise self._client_error(e, action, where) from e
        except S3UploadFailedError as e:
            cause = e.__cause__ or e.__context__
            if isinstance(cause, ClientError):
                raise self._client_error(cause, action, where) from e
            raise StorageError(f"S3 {action} of {where} at {self.endpoint} failed: {e}") from e
        except NoCredentialsError as e:
            raise StoragePermissionError(
                f"no AWS credentials found for {where}; set a workload identity or AWS_* variables"
            ) from e
        except BotoCoreError as e:
            raise StorageUnreachableError(
                f"S3 endpoint {self.endpoint} did not answer {action} of {where} "
                f"after {self.max_attempts} attempts: {e}"
            ) from e
        except Exception as e:
            raise StorageError(
                f"S3 {action} of {where} at {self.endpoint} failed: no readable answer in "
                f"{self.max_attempts} attempts ({type(e).__name__}: {e})"
            ) from e

    def _client_error(self, e: ClientError, action: str, where: str) -> StorageError:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code == "NoSuchBucket":
            return BucketNotFoundError(
                f"bucket {self.bucket!r} does not exist at {self.endpoint}; "
                "create it or correct the checkpoint URI"
            )
        if code in _UNKNOWN_KEY:
            return StoragePermissionError(
                f"the credentials in use are not accepted by {self.endpoint} for {where} "
                f"({code}): the access key is unknown or its secret is wrong; check the identity "
                "the pod gets (workload identity, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
            )
        if code in _DENIED:
            return StoragePermissionError(
                f"permission denied for {action} of {where} at {self.endpoint} ({code}); "
                "grant the training identity read/write on this prefix"
            )
        if code in _MISSING:
            return ObjectMissingError(f"{where} does not exist")
        return StorageError(f"S3 {action} of {where} at {self.endpoint} failed: {e}")

    def writer(self, key: str, size_hint: int = 0) -> PartWriter:
        return PartWriter(
            _S3Upload(self, key), part_size_for(size_hint), self.pool, PARTS_IN_FLIGHT
        )

    def create_only(self, key: str, data: bytes) -> bool:
        def create() -> bool:
            try:
                self.client.put_object(
                    Bucket=self.bucket, Key=self.prefix + key, Body=data, IfNoneMatch="*",
                    ChecksumCRC32C=checksum.crc32c(data),
                )  # fmt: skip
            except ClientError as e:
                if str(e.response.get("Error", {}).get("Code", "")) in _CONFLICT:
                    return False
                raise
            return True

        return self._request("create-only put", key, create)

    def get(self, key: str) -> bytes:
        def download() -> bytes:
            buffer = io.BytesIO()  # a fresh one each try: ranges land at their offsets
            self.client.download_fileobj(self.bucket, self.prefix + key, buffer, Config=DOWNLOAD)
            return buffer.getvalue()

        return self._request("download", key, download)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        def listing() -> list[ObjectInfo]:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            return [
                ObjectInfo(obj["Key"][len(self.prefix) :], obj["Size"])
                for page in pages
                for obj in page.get("Contents", [])
            ]

        return self._request("list", prefix, listing)

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # the API's batch limit
            batch = [{"Key": self.prefix + k} for k in keys[start : start + 1000]]
            delete = functools.partial(
                self.client.delete_objects, Bucket=self.bucket, Delete={"Objects": batch}
            )
            response = self._request("delete", keys[start], delete)
            for error in response.get("Errors", []):
                raise StorageError(
                    f"S3 delete of s3://{self.bucket}/{error['Key']} at {self.endpoint} failed: "
                    f"{error.get('Code')} {error.get('Message', '')}"
                )
