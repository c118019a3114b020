"""The conformance case ``retryable_fail``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

from conformance import Cases, S, State, check, describe, state_name
from taskbroker.client import duration


def retryable_fail(self: Cases, q: str) -> None:
    retry = S.RetryPolicy(max_attempts=3, initial_backoff=duration(0))
    t = self.submit_and_lease(S.TaskSpec(queue=q, retry=retry))
    resp = self.tb.broker.Fail(
        S.FailRequest(task_id=t.task_id, lease_token=t.lease_token, error_message="boom"), timeout=10
    )
    check(
        resp.state in (State.TASK_STATE_READY, State.TASK_STATE_SCHEDULED),
        f"Fail: state {state_name(resp.state)}, want READY or SCHEDULED",
    )
    check(resp.HasField("next_run_at"), "Fail: next_run_at is unset")
    tasks = self.lease(q, 1, 30, wait=5)
    check(
        len(tasks) == 1 and tasks[0].task_id == t.task_id and tasks[0].attempt == 2,
        f"second Lease: {describe(tasks)}, want task {t.task_id} with attempt 2",
    )
    self.complete(tasks[0])
