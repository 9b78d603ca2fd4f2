"""Nothing a committed manifest lists is ever written again. Every path that saves a step twice,
against the real S3-API server behind a proxy that records each request: the same content is a
no-op that is durable as it stands, other content a clear error naming the step."""

from __future__ import annotations

import time

import pytest
import torch
from spotsafe import Checkpointer, Extras, StepCommittedError
from spotsafe.agreement import Agreement
from spotsafe.preemption import PreemptionGuard
from spotsafe.termination import TerminationWatcher
from spotsafe_harness import s3_keys


@pytest.fixture
def recorded(s3_uri: str, proxy, monkeypatch: pytest.MonkeyPatch):
    """The run's URI with every S3 request going through the recording proxy."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    return s3_uri, proxy


def writes_to(proxy, step: int) -> list[str]:
    return [r for r in proxy.requests if r.startswith(("PUT", "POST")) and f"/step-{step}/" in r]


def state_at(value: float) -> dict:
    return {"model": Extras(w=torch.full((4,), value)), "extras": Extras(note="a")}


def test_save_after_maybe_save_of_the_same_step_writes_nothing(recorded) -> None:
    uri, proxy = recorded
    ckpt = Checkpointer(uri, every_steps=10)
    state = state_at(1.0)
    assert ckpt.maybe_save(10, state)
    ckpt.wait()
    before = writes_to(proxy, 10)
    ckpt.save(10, state)
    ckpt.close()  # durable as it stands: no error
    assert writes_to(proxy, 10) == before
    assert ckpt.last_committed_step == 10


def test_other_content_at_a_committed_step_is_refused_and_loses_nothing(recorded) -> None:
    uri, proxy = recorded
    ckpt = Checkpointer(uri, every_steps=10)
    state = state_at(1.0)
    ckpt.maybe_save(10, state)
    ckpt.wait()
    before = writes_to(proxy, 10)
    state["extras"]["note"] = "changed after the save"
    ckpt.save(10, state)
    with pytest.raises(StepCommittedError, match="step 10 is already committed.*other content"):
        ckpt.close()
    assert writes_to(proxy, 10) == before
    fresh = state_at(0.0)
    assert Checkpointer(uri).restore(fresh) == 10
    assert fresh["extras"]["note"] == "a" and torch.equal(fresh["model"]["w"], torch.ones(4))


def test_a_second_save_while_the_first_is_in_flight_writes_nothing(recorded) -> None:
    uri, proxy = recorded
    ckpt = Checkpointer(uri, max_in_flight=2)
    state = state_at(2.0)
    proxy.flowing.clear()  # hold the first upload mid-stream
    ckpt.save(7, state)
    ckpt.save(7, state)
    proxy.flowing.set()
    ckpt.close()
    assert sum("/manifest.json" in r for r in writes_to(proxy, 7)) == 1
    assert [k for k in s3_keys(uri) if k.startswith("step-7/")] == [
        "step-7/attempt-1/state.pt",
        "step-7/manifest.json",
    ]


def test_final_save_after_maybe_save_of_that_step_is_durable_without_a_write(recorded) -> None:
    uri, proxy = recorded
    ckpt = Checkpointer(uri, every_steps=5)
    guard = PreemptionGuard(TerminationWatcher())
    guard.decision = Agreement(stop=True, checkpoint_now=False, deadline=time.time() + 30)
    state = state_at(3.0)
    assert ckpt.maybe_save(5, state)  # the notice lands on a step maybe_save just took
    report = guard.final_save(ckpt, 5, state)
    assert report["durable_at"] is not None and report["fitted_deadline"] is True
    assert [r.rsplit("/", 1)[1] for r in writes_to(proxy, 5)] == ["state.pt", "manifest.json"]


def test_restart_of_a_finished_run_saving_its_last_step_again_is_a_no_op(recorded) -> None:
    uri, proxy = recorded
    first = Checkpointer(uri)
    first.save(20, state_at(4.0))
    first.close()
    before = writes_to(proxy, 20)

    restarted = Checkpointer(uri)  # a pod killed after its last commit, started again
    state = state_at(0.0)
    assert restarted.restore(state) == 20
    restarted.save(20, state)
    restarted.close()
    assert writes_to(proxy, 20) == before
    assert [k for k in s3_keys(uri) if k.startswith("step-20/")] == [
        "step-20/attempt-1/state.pt",
        "step-20/manifest.json",
    ]
