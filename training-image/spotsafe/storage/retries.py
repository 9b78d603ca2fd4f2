"""Requests the client libraries could not make sense of are tried again here.

botocore and google-cloud-storage retry what they recognise as transient: refused or reset
connections, timeouts, 5xx answers, throttling. An answer cut short can reach the caller as
something else. A response that ends inside its headers is taken by Python's HTTP client as a
complete one with fewer headers and no body, and then fails to parse (botocore: ``KeyError:
'ContentLength'``, ``ValueError: Invalid timestamp``; google-cloud-storage: a ``JSONDecodeError``).
When the cut falls between two header lines nothing fails to parse: the answer looks like a
complete one with an empty body, and a listing would come back empty. Both services frame every
answer that has a body (Content-Length, or chunked), so ``refuse_unframed`` turns an unframed
one into an error. Each store says which of its errors are the service's (or its library's) last
word; any other error of a request that is safe to repeat is retried here, with exponential
backoff and jitter, up to the store's ``max_attempts``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from spotsafe.errors import SpotsafeError
from spotsafe.storage.private_random import jitter

log = logging.getLogger(__name__)

T = TypeVar("T")
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0


class AnswerCutShortError(Exception):
    """An answer that ended inside its headers."""


def refuse_unframed(status: int, headers: Mapping[str, str]) -> None:
    """Raise AnswerCutShortError for an answer that may carry a body but says neither how long it
    is nor that it comes in chunks (headers: a case-insensitive mapping)."""
    if status in (204, 304) or "content-length" in headers:
        return
    if "chunked" not in headers.get("transfer-encoding", "").lower():
        raise AnswerCutShortError(
            f"an answer ({status}) ended inside its headers: it has no Content-Length and is "
            "not chunked"
        )


def call(request: Callable[[], T], attempts: int, final: Callable[[Exception], bool]) -> T:
    """request(), repeated after each failure that is not final (final(e) is false and e is no
    SpotsafeError), at most `attempts` times in all; the last failure is raised as it is."""
    attempt = 1
    while True:
        try:
            return request()
        except Exception as e:
            if attempt >= attempts or isinstance(e, SpotsafeError) or final(e):
                raise
            log.info("storage request failed (%s: %s); trying again", type(e).__name__, e)
            time.sleep(jitter(min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (attempt - 1))))
            attempt += 1


class _WithoutTraceback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True


_ONE_LINE = _WithoutTraceback()


def quiet_cut_headers() -> None:
    """urllib3 logs a response whose headers were cut off with a traceback, and carries on; the
    store retries the request, so its one warning line says enough."""
    logging.getLogger("urllib3.connection").addFilter(_ONE_LINE)
