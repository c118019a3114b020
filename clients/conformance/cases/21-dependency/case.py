"""The conformance case ``dependency``, for the Python client: README.md beside this file says what
it does and expects."""

from __future__ import annotations

from conformance import Cases, S, State, check, payloads, state_name
from taskbroker.v1 import event_pb2


def dependency(self: Cases, q: str) -> None:
    a, b = self.tb.broker.Submit(
        S.SubmitRequest(
            tasks=[S.TaskSpec(queue=q, payload=b"a"), S.TaskSpec(queue=q, payload=b"b", depends_on_index=[0])]
        ),
        timeout=10,
    ).results
    tb = self.get_task(b.task_id)
    check(tb.state == State.TASK_STATE_BLOCKED, f"b is {state_name(tb.state)}, want BLOCKED")
    check(list(tb.depends_on) == [a.task_id], f"b depends_on {list(tb.depends_on)}, want [{a.task_id}]")
    got = self.lease(q, 10)
    check(payloads(got) == ["a"], f"first Lease returned {payloads(got)}, want ['a']")
    self.complete(got[0])
    tb = self.get_task(b.task_id)
    check(tb.state == State.TASK_STATE_READY, f"after a completed b is {state_name(tb.state)}, want READY")
    got = self.lease(q, 10, wait=5)
    check(payloads(got) == ["b"], f"second Lease returned {payloads(got)}, want ['b']")
    self.complete(got[0])

    c = self.tb.submit(q, b"c")
    d, e = self.tb.broker.Submit(
        S.SubmitRequest(
            tasks=[
                S.TaskSpec(queue=q, payload=b"d", depends_on=[c.task_id]),
                S.TaskSpec(queue=q, payload=b"e", depends_on=[c.task_id], run_if_dependency_fails=True),
            ]
        ),
        timeout=10,
    ).results
    got = self.lease(q, 10)
    check(payloads(got) == ["c"], f"third Lease returned {payloads(got)}, want ['c'] (d and e BLOCKED)")
    self.tb.broker.Fail(
        S.FailRequest(
            task_id=got[0].task_id, lease_token=got[0].lease_token, error_message="broken", non_retryable=True
        ),
        timeout=10,
    )
    td, te = self.get_task(d.task_id), self.get_task(e.task_id)
    check(
        td.state == State.TASK_STATE_CANCELLED and td.cancel_reason == event_pb2.CANCEL_REASON_DEPENDENCY_FAILED,
        f"d is {state_name(td.state)} ({event_pb2.CancelReason.Name(td.cancel_reason)}),"
        " want CANCELLED (CANCEL_REASON_DEPENDENCY_FAILED)",
    )
    check(te.state == State.TASK_STATE_READY, f"e (run_if_dependency_fails) is {state_name(te.state)}, want READY")
