"""The conformance case ``dead_result``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

from conformance import Cases
from conformance_results import State, check
from taskbroker import PermanentError, TaskContext, TaskFailedError, Worker


def dead_result(self: Cases, q: str) -> None:
    d = self.tb.submit(q, b"order-7").task_id

    def handle(ctx: TaskContext) -> bytes:
        raise PermanentError("no such order")

    with Worker(self.tb, queues=[q], handler=handle, poll_wait=1, worker_id="conf-python"):
        try:
            self.tb.wait(d, timeout=20)
        except TaskFailedError as err:
            waited: TaskFailedError | None = err
        else:
            waited = None
    check(waited is not None, "wait returned, want a TaskFailedError")
    assert waited is not None
    try:
        self.tb.get_result(d, dict)
    except TaskFailedError as err:
        read: TaskFailedError | None = err
    else:
        read = None
    check(read is not None, "get_result returned, want a TaskFailedError")
    assert read is not None
    for what, e in (("wait", waited), ("get_result", read)):
        check(
            (e.task_id, e.state, e.last_error) == (d, State.TASK_STATE_DEAD, "no such order"),
            f"{what}: TaskFailedError({e.task_id}, {e.state_name}, {e.last_error!r}), want ({d}, DEAD, 'no such order')",
        )
