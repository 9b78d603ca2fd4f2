"""Object storage behind one small interface: S3 API, GCS API and a local file:// tier.

Keys are relative to the URI's prefix, always with ``/`` separators. ``put_if_absent`` is the
create-only write the checkpoint protocol commits with. Objects are written as streams of parts
(see ``parts``), each with a CRC32C that the storage service checks on upload.
"""

from __future__ import annotations

import re
from urllib.parse import urlparse

from spotsafe.errors import InvalidURIError
from spotsafe.storage.interface import ObjectInfo, ObjectStore

__all__ = ["ObjectInfo", "ObjectStore", "open_store"]

URI_FORMS = "s3://bucket/prefix, gs://bucket/prefix or file:///absolute/path"


def open_store(uri: str, *, max_attempts: int = 5, connect_timeout_s: float = 5.0) -> ObjectStore:
    """The store for a checkpoint URI; raises InvalidURIError naming what is wrong."""
    parsed = urlparse(uri)
    prefix = parsed.path.strip("/")
    if parsed.scheme in ("s3", "gs"):
        if not parsed.netloc:
            raise InvalidURIError(f"checkpoint URI {uri!r} names no bucket; expected {URI_FORMS}")
        _check_bucket_name(uri, parsed.scheme, parsed.netloc)
        if parsed.scheme == "s3":
            from spotsafe.storage.s3 import S3Store

            return S3Store(uri, parsed.netloc, prefix, max_attempts, connect_timeout_s)
        from spotsafe.storage.gcs import GCSStore

        return GCSStore(uri, parsed.netloc, prefix, max_attempts, connect_timeout_s)
    if parsed.scheme == "file":
        if parsed.netloc or not parsed.path.startswith("/"):
            raise InvalidURIError(
                f"checkpoint URI {uri!r} is not an absolute file URI; use file:///absolute/path"
            )
        from spotsafe.storage.local import LocalStore

        return LocalStore(uri, parsed.path)
    raise InvalidURIError(f"checkpoint URI {uri!r} is not supported; expected {URI_FORMS}")


# The services' naming rules (S3: "General purpose bucket naming rules"; GCS: "Bucket names"):
# a name outside them is the user's to fix, refused here rather than sent and retried.
_BUCKET_NAMES = {
    "s3": (re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"), "3-63 lowercase letters, digits, "
           "dots and hyphens, starting and ending with a letter or digit"),
    "gs": (re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]"), "3-63 lowercase letters, digits, "
           "dots, hyphens and underscores (up to 222 with dots), starting and ending with a "
           "letter or digit"),
}  # fmt: skip


def _check_bucket_name(uri: str, scheme: str, bucket: str) -> None:
    pattern, rule = _BUCKET_NAMES[scheme]
    parts_fit = all(len(part) <= 63 for part in bucket.split("."))
    if not pattern.fullmatch(bucket) or ".." in bucket or not parts_fit:
        raise InvalidURIError(
            f"checkpoint URI {uri!r} names bucket {bucket!r}, which is not a valid bucket name: "
            f"{rule}"
        )
