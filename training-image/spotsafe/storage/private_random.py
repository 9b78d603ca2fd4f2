"""Storage libraries draw retry jitter (and multipart boundaries) from a generator of their own.

botocore, urllib3, google-api-core, google-auth and google-cloud-storage's media uploads call
Python's global ``random``. Uploads run beside training, whose global RNG is part of an exact
resume, so a single retried request would shift the training's random stream. Each of those
modules gets a private ``random.Random`` instead (it has the same methods); botocore's standard
retry mode, which bound ``random.random`` when it was imported, gets a backoff that uses it, and
spotsafe's own retries (``retries``) draw their jitter from it too.
"""

from __future__ import annotations

import importlib
import random

from botocore.retries import standard

_PRIVATE = random.Random()


class _PrivateJitterBackoff(standard.ExponentialBackoff):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("random", _PRIVATE.random)
        super().__init__(*args, **kwargs)


def jitter(upper_s: float) -> float:
    """A backoff drawn uniformly from [0, upper_s) ("full jitter"), off the global RNG."""
    return _PRIVATE.uniform(0.0, upper_s)


def isolate(*modules: str) -> None:
    """Give each named module (one that calls ``random.<fn>()``) the private generator."""
    for name in modules:
        importlib.import_module(name).random = _PRIVATE


def isolate_botocore() -> None:
    """Before creating a boto3 client: its retries leave the global RNG alone."""
    isolate("botocore.retryhandler", "urllib3.util.retry")
    standard.ExponentialBackoff = _PrivateJitterBackoff


def isolate_google() -> None:
    """Before creating a google-cloud-storage client: likewise."""
    isolate(
        "google.api_core.retry.retry_base",
        "google.auth._exponential_backoff",
        "google.cloud.storage._media._upload",
        "urllib3.util.retry",
    )
