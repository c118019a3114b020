"""The conformance case ``non_retryable_fail``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

from conformance import Cases, S, State, check, state_name


def non_retryable_fail(self: Cases, q: str) -> None:
    t = self.submit_and_lease(S.TaskSpec(queue=q))
    resp = self.tb.broker.Fail(
        S.FailRequest(task_id=t.task_id, lease_token=t.lease_token, error_message="bad input", non_retryable=True),
        timeout=10,
    )
    check(resp.state == State.TASK_STATE_DEAD, f"Fail: state {state_name(resp.state)}, want DEAD")
    task = self.get_task(t.task_id)
    check(
        task.state == State.TASK_STATE_DEAD and task.last_error == "bad input",
        f"GetTask: state {state_name(task.state)} last_error {task.last_error!r}, want DEAD and 'bad input'",
    )
