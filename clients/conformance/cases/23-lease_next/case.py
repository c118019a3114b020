"""The conformance case ``lease_next``, for the Python client: README.md beside this file says what
it does and expects."""

from __future__ import annotations

import grpc

from conformance import WORKER_ID, CaseFailed, Cases, S, State, check, payloads, state_name
from taskbroker.client import duration


def lease_next(self: Cases, q: str) -> None:
    specs = [S.TaskSpec(queue=q, payload=p.encode(), priority=n) for p, n in (("a", 2), ("b", 1), ("c", 0))]
    self.tb.broker.Submit(S.SubmitRequest(tasks=specs), timeout=10)
    got = self.lease(q, 1)
    check(payloads(got) == ["a"], f"Lease returned {payloads(got)}, want ['a']")
    nxt = S.LeaseRequest(worker_id=WORKER_ID, queues=[q], max_tasks=1, lease_duration=duration(30))
    done = self.tb.broker.Complete(
        S.CompleteRequest(task_id=got[0].task_id, lease_token=got[0].lease_token, lease_next=nxt), timeout=10
    )
    b = list(done.next_tasks)
    check(payloads(b) == ["b"], f"Complete's next_tasks {payloads(b)}, want ['b']")
    check(b[0].attempt == 1 and b[0].lease_token != "", f"b: attempt {b[0].attempt}, want 1 with a lease token")
    a = self.get_task(got[0].task_id)
    check(a.state == State.TASK_STATE_SUCCEEDED, f"a is {state_name(a.state)}, want SUCCEEDED")
    failed = self.tb.broker.Fail(
        S.FailRequest(
            task_id=b[0].task_id,
            lease_token=b[0].lease_token,
            error_message="boom",
            non_retryable=True,
            lease_next=nxt,
        ),
        timeout=10,
    )
    c = list(failed.next_tasks)
    check(failed.state == State.TASK_STATE_DEAD, f"Fail: state {state_name(failed.state)}, want DEAD")
    check(payloads(c) == ["c"], f"Fail's next_tasks {payloads(c)}, want ['c']")
    bad = S.LeaseRequest(worker_id=WORKER_ID, queues=[q], max_tasks=0, lease_duration=duration(30))
    try:
        self.tb.broker.Complete(
            S.CompleteRequest(task_id=c[0].task_id, lease_token=c[0].lease_token, lease_next=bad), timeout=10
        )
        raise CaseFailed("Complete with lease_next.max_tasks 0: OK, want INVALID_ARGUMENT")
    except grpc.RpcError as err:
        check(
            err.code() == grpc.StatusCode.INVALID_ARGUMENT and "lease_next.max_tasks" in (err.details() or ""),
            f"Complete with lease_next.max_tasks 0: {err.code().name} {err.details()!r}, "
            "want INVALID_ARGUMENT naming lease_next.max_tasks",
        )
    tc = self.get_task(c[0].task_id)
    check(tc.state == State.TASK_STATE_LEASED, f"c is {state_name(tc.state)} after the refused Complete")
    last = self.tb.broker.Complete(
        S.CompleteRequest(task_id=c[0].task_id, lease_token=c[0].lease_token, lease_next=nxt), timeout=10
    )
    check(not last.next_tasks, f"the last Complete's next_tasks {payloads(list(last.next_tasks))}, want none")
    tc = self.get_task(c[0].task_id)
    check(tc.state == State.TASK_STATE_SUCCEEDED, f"c is {state_name(tc.state)}, want SUCCEEDED")
