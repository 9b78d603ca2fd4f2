"""The GCS API through google-cloud-storage (the `gcs` extra).

The client honours STORAGE_EMULATOR_HOST, so the same code talks to GCS and to fake-gcs-server.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

from spotsafe.errors import (
    BucketNotFoundError,
    ObjectMissingError,
    StorageError,
    StoragePermissionError,
    StorageUnreachableError,
)
from spotsafe.storage import ObjectInfo


class GCSStore:
    def __init__(
        self, uri: str, bucket: str, prefix: str, max_attempts: int, connect_timeout_s: float
    ) -> None:
        try:
            from google.api_core.retry import Retry
            from google.cloud import storage
            from google.cloud.storage._media import _upload
        except ImportError as e:
            raise StorageError("gs:// URIs need the GCS client: pip install 'spotsafe[gcs]'") from e
        # Multipart uploads draw their boundary from the module-level `random`. Uploads run beside
        # training, whose global RNG is part of an exact resume: give them a generator of their own.
        _upload.random = random.Random()
        self.uri = uri
        self.prefix = f"{prefix}/" if prefix else ""
        self.max_attempts = max_attempts
        self.client = storage.Client()
        self.bucket = self.client.bucket(bucket)
        self.endpoint = self.client._connection.API_BASE_URL
        # Exponential backoff bounded by a deadline that grows with the attempts allowed.
        self.retry = Retry(initial=0.2, maximum=5.0, multiplier=2.0, timeout=2.0 * max_attempts)
        self.timeout = (connect_timeout_s, 60)

    def _blob(self, key: str):
        return self.bucket.blob(self.prefix + key)

    def _upload(self, key: str, data: bytes | memoryview, **conditions: int) -> None:
        self._blob(key).upload_from_string(
            bytes(data), retry=self.retry, timeout=self.timeout, **conditions
        )

    @contextmanager
    def _translated(self, action: str, key: str = "") -> Iterator[None]:
        from google.api_core import exceptions as gexc
        from google.auth.exceptions import DefaultCredentialsError
        from requests.exceptions import ConnectionError as RequestsConnectionError
        from requests.exceptions import Timeout

        where = f"gs://{self.bucket.name}/{self.prefix}{key}"
        try:
            yield
        except gexc.NotFound as e:
            if not self.bucket.exists(retry=self.retry, timeout=self.timeout):
                raise BucketNotFoundError(
                    f"bucket {self.bucket.name!r} does not exist at {self.endpoint}; "
                    "create it or correct the checkpoint URI"
                ) from e
            raise ObjectMissingError(f"{where} does not exist") from e
        except (gexc.Forbidden, gexc.Unauthorized, DefaultCredentialsError) as e:
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

    def put(self, key: str, data: bytes | memoryview) -> None:
        with self._translated("upload", key):
            self._upload(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        with self._translated("create-only put", key):
            try:
                self._upload(key, data, if_generation_match=0)
            except PreconditionFailed:
                return False
        return True

    def get(self, key: str) -> bytes:
        with self._translated("download", key):
            return self._blob(key).download_as_bytes(retry=self.retry, timeout=self.timeout)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        with self._translated("list", prefix):
            blobs = self.client.list_blobs(
                self.bucket, prefix=self.prefix + prefix, retry=self.retry, timeout=self.timeout
            )
            return [ObjectInfo(b.name[len(self.prefix) :], b.size) for b in blobs]

    def delete(self, keys: list[str]) -> None:
        from google.api_core.exceptions import NotFound

        for key in keys:
            with self._translated("delete", key):
                try:
                    self._blob(key).delete(retry=self.retry, timeout=self.timeout)
                except NotFound:
                    continue
