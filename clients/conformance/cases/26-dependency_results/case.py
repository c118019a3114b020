"""The conformance case ``dependency_results``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

from conformance import Cases
from conformance_results import State, check
from taskbroker import TaskContext, Worker


def dependency_results(self: Cases, q: str) -> None:
    a = self.tb.submit(q, b"a").task_id
    b = self.tb.submit(q, b"b", depends_on=[a]).task_id
    seen: dict[str, dict[str, bytes]] = {}

    def handle(ctx: TaskContext) -> bytes:
        if ctx.task_id == a:
            return b"a-result"
        seen[ctx.task_id] = ctx.dependency_results
        return ctx.dependency_result(a, bytes)

    with Worker(self.tb, queues=[q], handler=handle, poll_wait=1, worker_id="conf-python"):
        self.tb.wait(b, timeout=20)
    check(seen.get(b) == {a: b"a-result"}, f"b's handler saw dependency_results {seen.get(b)}, want {{{a}: a-result}}")
    tb = self.tb.get_task(b)
    check(
        tb.state == State.TASK_STATE_SUCCEEDED and tb.result == b"a-result",
        f"b is {State.Name(tb.state)} with result {tb.result!r}, want SUCCEEDED with a-result",
    )
