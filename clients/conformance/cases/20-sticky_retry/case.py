"""The conformance case ``sticky_retry``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

from conformance import WORKER_ID, Cases, S, State, check, describe, state_name
from taskbroker import routing
from taskbroker.client import duration


def sticky_retry(self: Cases, q: str) -> None:
    retry = S.RetryPolicy(max_attempts=3, initial_backoff=duration(0))
    self.tb.submit(q, b"s", retry=retry, sticky=routing.sticky("soft", timeout=60))
    got = self.lease_as(q, WORKER_ID)
    check(len(got) == 1, f"leased {describe(got)}, want 1 task")
    resp = self.tb.broker.Fail(
        S.FailRequest(task_id=got[0].task_id, lease_token=got[0].lease_token, error_message="boom"), timeout=10
    )
    check(
        resp.state in (State.TASK_STATE_READY, State.TASK_STATE_SCHEDULED),
        f"Fail: state {state_name(resp.state)}, want READY or SCHEDULED",
    )
    other = f"{WORKER_ID}-other"
    stolen = self.lease_as(q, other)
    check(not stolen, f"{other} leased the retry reserved for {WORKER_ID}: {describe(stolen)}")
    again = self.lease_as(q, WORKER_ID, wait=5)
    check(
        len(again) == 1 and again[0].task_id == got[0].task_id and again[0].attempt == 2,
        f"{WORKER_ID} leased {describe(again)}, want task {got[0].task_id} with attempt 2",
    )
    self.complete(again[0])
