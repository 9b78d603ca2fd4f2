"""The GCS API through google-cloud-storage (the `gcs` extra).

Objects that fit one part go up in one request, larger ones as a resumable upload fed part by
part: GCS takes a resumable upload's chunks in order, so one is in flight (on a thread of its
own, while the next part fills). Either way the
client sends the CRC32C for GCS to check (metadata, or ``x-goog-hash`` with the last chunk) and
compares it with the one GCS reports. The client honours STORAGE_EMULATOR_HOST, so the same code
talks to GCS and to fake-gcs-server.

A training identity may reach objects under its team's prefix and nothing on the bucket, so the
store makes object calls only: a 404 on a download means the object is missing, on a listing or
an upload that the bucket is (the runtime lists before it reads).
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

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
from spotsafe.storage.parts import PartStore, PartWriter, Written, part_size_for
from spotsafe.storage.private_random import isolate_google

log = logging.getLogger(__name__)
T = TypeVar("T")


def _answered(e: Exception) -> bool:
    """The client's own errors: the service's answer, or a failure its Retry gave up on."""
    from google.api_core.exceptions import GoogleAPIError
    from google.auth.exceptions import GoogleAuthError
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from requests.exceptions import Timeout

    return isinstance(e, (GoogleAPIError, GoogleAuthError, RequestsConnectionError, Timeout))


def _refuse_unframed(response, *args: Any, **kwargs: Any) -> None:
    retries.refuse_unframed(response.status_code, response.headers)


# GCS's 403: "<caller> does not have <permission> access to the Google Cloud Storage object. ..."
_DENIED = re.compile(
    r"(?P<caller>[\w.+-]+@[\w.-]+|Anonymous caller) does not have (?P<permission>[\w.]+) access"
)
# The client looks its buckets' metadata up in the background (storage.buckets.get), for trace
# attributes; a training identity may not, and every refusal is an ERROR in the audit log
# (googleapis/google-cloud-python#17650). This is the library's switch for it.
_NO_BUCKET_LOOKUP = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"


class _GCSUpload:
    def __init__(self, store: GCSStore, key: str, part_size: int) -> None:
        self.store = store
        self.key = key
        self.part_size = part_size
        self.stream: Any = None

    def whole(self, data: bytearray, written: Written) -> None:
        with self.store._translated("upload", self.key):
            blob = self.store._retried(functools.partial(self.store._upload, self.key, data))
            if blob.crc32c != written.crc32c:  # GCS checks it; an emulator may not
                self._refuse(f"GCS stored CRC32C {blob.crc32c}, sent {written.crc32c}")

    def start(self) -> None:
        self.stream = self.store._blob(self.key).open(
            "wb",
            chunk_size=self.part_size,
            checksum="crc32c",
            retry=self.store.retry,
            timeout=self.store.timeout,
        )

    def part(self, number: int, data: bytearray, crc: int) -> None:
        with self.store._translated("upload", self.key):
            self.stream.write(data)  # exactly one chunk: it is sent before write returns

    def complete(self, parts: list[None], written: Written) -> None:
        from google.cloud.storage.exceptions import DataCorruption

        with self.store._translated("upload", self.key):
            try:
                self.stream.close()  # compares the CRC32C GCS reports with the one sent
            except DataCorruption as e:
                self._refuse(str(e))
            except Exception:
                # The last chunk's answer was lost and its retry found the session finished
                # (fake-gcs-server forgets it): done, if the object holds what was sent.
                if not self._holds(written):
                    raise

    def _holds(self, written: Written) -> bool:
        get = functools.partial(
            self.store.bucket.get_blob,
            self.store.prefix + self.key, retry=self.store.retry, timeout=self.store.timeout,
        )  # fmt: skip
        blob = self.store._retried(get)
        return blob is not None and (blob.size, blob.crc32c) == (written.size, written.crc32c)

    def _refuse(self, why: str) -> None:
        """What was stored is not what was sent: delete it and fail the upload."""
        self.store._blob(self.key).delete(retry=self.store.retry, timeout=self.store.timeout)
        raise StorageError(
            f"GCS upload of gs://{self.store.bucket.name}/{self.store.prefix}{self.key} at "
            f"{self.store.endpoint} was refused, its checksum does not match: {why}"
        )

    def abort(self) -> None:
        try:
            self.stream.terminate()
        except Exception as e:  # noqa: BLE001 - GCS drops an unfinished session within a week
            log.warning("could not cancel the upload of %s: %s", self.key, e)


class GCSStore(PartStore):
    def __init__(
        self, uri: str, bucket: str, prefix: str, max_attempts: int, connect_timeout_s: float
    ) -> None:
        try:
            from google.cloud import storage
            from google.cloud.storage.retry import DEFAULT_RETRY
        except ImportError as e:
            raise StorageError("gs:// URIs need the GCS client: pip install 'spotsafe[gcs]'") from e
        isolate_google()
        os.environ.setdefault(_NO_BUCKET_LOOKUP, "true")
        self.uri = uri
        self.prefix = f"{prefix}/" if prefix else ""
        self.max_attempts = max_attempts
        self.client = storage.Client()
        self.bucket = self.client.bucket(bucket)
        self.endpoint = self.client._connection.API_BASE_URL
        # The library's choice of what to retry (5xx, 408, 429, broken connections), with
        # exponential backoff for about as long as max_attempts tries that each wait out the
        # connect timeout and the longest backoff.
        self.retry = DEFAULT_RETRY.with_delay(
            initial=retries.FIRST_BACKOFF_S, maximum=retries.MAX_BACKOFF_S, multiplier=2.0
        ).with_timeout(max_attempts * (connect_timeout_s + retries.MAX_BACKOFF_S))
        self.client._http.hooks["response"].append(_refuse_unframed)
        retries.quiet_cut_headers()
        self.timeout = (connect_timeout_s, 60)
        self.pool = ThreadPoolExecutor(1, "spotsafe-gcs-part")  # one worker: chunks in order

    def _retried(self, request: Callable[[], T]) -> T:
        """A request tried again while its answer cannot be read (see retries)."""
        return retries.call(request, self.max_attempts, _answered)

    def _blob(self, key: str):
        return self.bucket.blob(self.prefix + key)

    def _upload(self, key: str, data: bytes | bytearray, **conditions: int):
        blob = self._blob(key)
        blob.upload_from_string(
            bytes(data), checksum="crc32c", retry=self.retry, timeout=self.timeout, **conditions
        )
        return blob

    @contextmanager
    def _translated(self, action: str, key: str = "") -> Iterator[None]:
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import DefaultCredentialsError
        from requests.exceptions import ConnectionError as RequestsConnectionError
        from requests.exceptions import Timeout

        where = f"gs://{self.bucket.name}/{self.prefix}{key}"
        try:
            yield
        except SpotsafeError:
            raise
        except gexc.NotFound as e:
            if action == "download":  # listings and uploads 404 only when the bucket is missing
                raise ObjectMissingError(f"{where} does not exist") from e
            raise BucketNotFoundError(
                f"bucket {self.bucket.name!r} does not exist at {self.endpoint}; "
                "create it or correct the checkpoint URI"
            ) from e
        except gexc.Forbidden as e:
            denied = _DENIED.search(e.message)
            who = (
                f"{denied['caller']} lacks {denied['permission']}"
                if denied
                else f"GCS said: {e.message}"
            )
            raise StoragePermissionError(
                f"permission denied for {action} of {where} at {self.endpoint}: {who}; "
                "grant the training identity read/write on this prefix"
            ) from e
        except (gexc.Unauthorized, DefaultCredentialsError) as e:
            raise StoragePermissionError(
                f"permission denied for {action} of {where} at {self.endpoint}; "
                "grant the training identity read/write on this prefix"
            ) from e
        except (gexc.RetryError, RequestsConnectionError, Timeout) as e:
            raise StorageUnreachableError(
                f"GCS endpoint {self.endpoint} did not answer {action} of {where} "
                f"within {self.max_attempts} attempts: {e}"
            ) from e
        except gexc.GoogleAPIError as e:
            raise StorageError(f"GCS {action} of {where} at {self.endpoint} failed: {e}") from e
        except Exception as e:
            raise StorageError(
                f"GCS {action} of {where} at {self.endpoint} failed: {type(e).__name__}: {e}"
            ) from e

    def writer(self, key: str, size_hint: int = 0) -> PartWriter:
        part_size = part_size_for(size_hint)
        return PartWriter(_GCSUpload(self, key, part_size), part_size, self.pool, in_flight=1)

    def create_only(self, key: str, data: bytes) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        with self._translated("create-only put", key):
            try:
                self._retried(functools.partial(self._upload, key, data, if_generation_match=0))
            except PreconditionFailed:
                return False
        return True

    def get(self, key: str) -> bytes:
        with self._translated("download", key):
            download = self._blob(key).download_as_bytes
            return self._retried(
                functools.partial(download, retry=self.retry, timeout=self.timeout)
            )

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        def listing() -> list[ObjectInfo]:
            blobs = self.client.list_blobs(
                self.bucket, prefix=self.prefix + prefix, retry=self.retry, timeout=self.timeout
            )
            return [ObjectInfo(b.name[len(self.prefix) :], b.size) for b in blobs]

        with self._translated("list", prefix):
            return self._retried(listing)

    def delete(self, keys: list[str]) -> None:
        from google.api_core.exceptions import NotFound

        for key in keys:
            with self._translated("delete", key):
                try:
                    delete = self._blob(key).delete
                    self._retried(functools.partial(delete, retry=self.retry, timeout=self.timeout))
                except NotFound:
                    continue
