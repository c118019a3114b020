"""The conformance case ``complete_result``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

from conformance import Cases, S, State, check, state_name


def complete_result(self: Cases, q: str) -> None:
    t = self.submit_and_lease(S.TaskSpec(queue=q))
    self.complete(t, b"done:42")
    self.complete(t, b"done:42")
    task = self.get_task(t.task_id)
    check(
        task.state == State.TASK_STATE_SUCCEEDED and task.result == b"done:42",
        f"GetTask: state {state_name(task.state)} result {task.result!r}, want SUCCEEDED and b'done:42'",
    )
