"""A flaky network never fails a run. A seeded fault-injecting proxy (fault_proxy) stands between
the runtime and the real local S3-API and GCS servers: 5xx before and after the server acted,
resets mid-body, answers cut inside their headers, 2-5 s delays, answers dropped after the server
acted. The trainer is also SIGKILLed at random moments and started again. Every run ends with exit
0 and weights bitwise-equal to an uninterrupted run's, no traceback, no false "another writer",
and no committed object written again (seen from the server's side of the proxy).

CI runs one trial per store. The soak: SPOTSAFE_FAULT_TRIALS=12 runs twelve per store; with -s
each trial prints its figures (requests, faults by kind, kills, tracebacks) as one JSON line.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from collections.abc import Iterator
from urllib.parse import unquote, urlparse

import pytest
from fault_proxy import FAULT_KINDS, Exchange, FaultProxy
from spotsafe import Checkpointer, Extras
from spotsafe.errors import StorageError
from spotsafe.storage import open_store
from spotsafe.storage.parts import PART_SIZE
from spotsafe_harness import INTERRUPTED_RUN, run_trainer, start_trainer

TRIALS = int(os.environ.get("SPOTSAFE_FAULT_TRIALS", "1"))
RATE = 0.2  # of requests that meet a fault: a dozen or more per trial
# The emulator's variable (GCS) or the endpoint's (S3) that points a trainer at the proxy.
ENDPOINT_VARIABLE = {"s3": "AWS_ENDPOINT_URL", "gcs": "STORAGE_EMULATOR_HOST"}


@pytest.fixture(params=["s3", "gcs"])
def service(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store_uri(service: str, request: pytest.FixtureRequest) -> tuple[str, str]:
    """A fresh bucket's URI and the server behind it."""
    if service == "s3":
        return request.getfixturevalue("s3_uri"), request.getfixturevalue("s3_endpoint")
    return request.getfixturevalue("gcs_uri"), request.getfixturevalue("gcs_endpoint")


# ---- one fault, aimed ------------------------------------------------------------------------


@pytest.fixture
def proxied(
    service: str, store_uri: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, FaultProxy]]:
    """A fresh bucket's URI, which this process reaches through a fault proxy (no fault until
    the test injects one)."""
    uri, endpoint = store_uri
    proxy = FaultProxy(endpoint, service)
    monkeypatch.setenv(ENDPOINT_VARIABLE[service], proxy.url)
    yield uri, proxy
    proxy.close()


@pytest.mark.parametrize("kind", [k for k in FAULT_KINDS if k != "delay"])
def test_each_request_survives_a_fault_of_each_kind(
    proxied: tuple[str, FaultProxy], kind: str
) -> None:
    uri, proxy = proxied
    store = open_store(uri)
    operations = [
        lambda: store.put("step-1/attempt-1/state.pt", b"s" * 3000),
        lambda: store.put_if_absent("step-1/manifest.json", b"m"),
        lambda: store.get("step-1/attempt-1/state.pt"),
        lambda: store.list("step-1/"),
        lambda: store.delete(["step-0/gone"]),
    ]
    results = []
    for operation in operations:
        proxy.inject(kind, ".")  # the operation's first request
        results.append(operation())
    assert sum(proxy.injected.values()) == len(operations)
    assert results[1] is True, "the create-only write did not recognise its own commit"
    assert results[2] == b"s" * 3000
    assert sorted(o.key for o in results[3]) == [
        "step-1/attempt-1/state.pt",
        "step-1/manifest.json",
    ]


@pytest.mark.parametrize("service", ["s3"])
def test_answers_that_stay_unreadable_end_in_one_line(proxied: tuple[str, FaultProxy]) -> None:
    uri, proxy = proxied
    store = open_store(uri, max_attempts=2)
    store.put("step-1/attempt-1/state.pt", b"s")
    proxy.inject("cut_in_headers", ".", times=1000)
    with pytest.raises(StorageError) as failed:
        store.get("step-1/attempt-1/state.pt")
    message = str(failed.value)
    assert "step-1/attempt-1/state.pt" in message and proxy.url in message
    assert "\n" not in message


def test_a_create_only_write_whose_answer_was_lost_is_its_own(
    proxied: tuple[str, FaultProxy],
) -> None:
    uri, proxy = proxied
    store = open_store(uri)
    proxy.inject("drop_answer", r"^PUT .*/manifest\.json|ifGenerationMatch=0")
    assert store.put_if_absent("step-5/manifest.json", b'{"attempt": 1}')
    # The server created it, then refused the client's retry: the write recognised itself.
    assert [e.status for e in proxy.exchanges if e.method in ("PUT", "POST")] == [200, 412]
    assert not store.put_if_absent("step-5/manifest.json", b'{"attempt": 2}')
    assert store.get("step-5/manifest.json") == b'{"attempt": 1}'


def test_a_commit_whose_answer_was_lost_is_durable(proxied: tuple[str, FaultProxy]) -> None:
    uri, proxy = proxied
    ckpt = Checkpointer(uri)  # its lease is claimed: the next create-only write is the commit
    proxy.inject("drop_answer", r"/manifest\.json|ifGenerationMatch=0")
    ckpt.save(7, {"extras": Extras(a=1)})
    ckpt.close()  # "not durable" when the lost answer was taken for another writer's commit
    assert proxy.injected == {"drop_answer": 1}
    assert Checkpointer(uri, read_only=True).restore({"extras": Extras()}) == 7


@pytest.mark.parametrize("service", ["gcs"])
def test_a_gcs_upload_whose_last_answer_was_lost_is_done(proxied: tuple[str, FaultProxy]) -> None:
    uri, proxy = proxied
    store = open_store(uri)
    data = bytes(range(256)) * (PART_SIZE // 256 + 4096)  # two chunks of a resumable upload
    proxy.inject("drop_answer", r"^PUT /upload/", after=1)  # the last chunk's
    assert store.put("step-1/attempt-1/state.pt", data).size == len(data)
    assert proxy.injected == {"drop_answer": 1}
    assert store.get("step-1/attempt-1/state.pt") == data


# ---- whole runs, random faults and kills -----------------------------------------------------


@pytest.mark.parametrize("trial", range(TRIALS))
def test_runs_finish_exactly_through_faults_and_kills(
    service: str, store_uri: tuple[str, str], trial: int, uninterrupted: dict
) -> None:
    uri, endpoint = store_uri
    seed = trial * 2 + (service == "gcs")
    chance = random.Random(seed)
    proxy = FaultProxy(endpoint, service, seed=seed, rate=RATE)
    env = {ENDPOINT_VARIABLE[service]: proxy.url}
    errors = []
    for _ in range(chance.randint(1, 2)):
        # Killed at a random moment of its storage traffic (a full run makes about 40 requests).
        proc = start_trainer(*INTERRUPTED_RUN, "--checkpoint-uri", uri, env=env)
        kill_at = proxy.requests + chance.randint(1, 40)
        while proxy.requests < kill_at and proc.poll() is None:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode in (0, -signal.SIGKILL), err  # finished before the kill, or killed
        errors.append(err)
    rc, result, err = run_trainer(*INTERRUPTED_RUN, "--checkpoint-uri", uri, env=env)
    errors.append(err)
    proxy.close()

    assert rc == 0, err
    assert result["final_step"] == 60
    assert result["weights_sha256"] == uninterrupted["weights_sha256"]
    assert result["skipped"] == [], "a restore met a checkpoint it could not verify"
    tracebacks = sum(e.count("Traceback (most recent call last)") for e in errors)
    false_foreign = sum(e.count("by another writer") for e in errors)
    assert (tracebacks, false_foreign) == (0, 0), "\n".join(errors)
    committed = [o.key for o in open_store(uri).list("step-") if o.key.endswith("manifest.json")]
    assert committed, "no checkpoint is committed"
    _assert_nothing_committed_was_written_again(proxy.exchanges, service, committed)
    print(json.dumps({
        "service": service, "trial": trial, "seed": seed, "requests": proxy.requests,
        "faults": dict(proxy.injected), "kills": len(errors) - 1, "finished": rc == 0,
        "tracebacks": tracebacks, "false_another_writer": false_foreign,
        "own_commits_refused_on_retry": sum(e.status == 412 for e in proxy.exchanges),
    }))  # fmt: skip
    assert sum(proxy.injected.values()) > 0


def _assert_nothing_committed_was_written_again(
    exchanges: list[Exchange], service: str, committed: list[str]
) -> None:
    """Every manifest was created once; nothing under a step was stored after its manifest."""
    writes = [(i, key) for i, e in enumerate(exchanges) if (key := _stored_key(e, service))]
    manifests = {}
    for i, key in writes:
        if key.endswith("/manifest.json"):
            assert key not in manifests, f"{key} was created twice"
            manifests[key] = i
    assert set(committed) <= set(manifests), "the proxy missed a commit: the check sees nothing"
    for i, key in writes:
        manifest = key.split("/", 1)[0] + "/manifest.json"
        assert i <= manifests.get(manifest, i), f"{key} was written after {manifest} committed"


def _stored_key(e: Exchange, service: str) -> str | None:
    """The key (below the run's prefix) of an object the server stored in this exchange."""
    if not 200 <= e.status < 300 or e.method not in ("PUT", "POST"):
        return None
    path, _, query = e.target.partition("?")
    if service == "s3":  # PutObject, or CompleteMultipartUpload
        if ("uploadId=" in query) != (e.method == "POST") or "partNumber=" in query:
            return None
        name = unquote(path).split("/", 2)[2]
    else:  # a finished upload answers with the object's resource
        if not urlparse(e.target).path.startswith("/upload/") or not e.body:
            return None
        name = json.loads(e.body).get("name", "")
    return re.sub(r"^run/", "", name) or None
