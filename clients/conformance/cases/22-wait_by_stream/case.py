"""The conformance case ``wait_by_stream``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

import concurrent.futures

from conformance import CaseFailed, Cases, State, check, describe, state_name
from taskbroker import WaitTimeout


def wait_by_stream(self: Cases, q: str) -> None:
    w = self.tb.submit(q, b"w").task_id
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(self.tb.wait, w, timeout=20)
        got = self.lease(q, 1, wait=10)
        check(len(got) == 1 and got[0].task_id == w, f"Lease returned {describe(got)}, want {w}")
        self.complete(got[0], b"waited")
        task = waiting.result(timeout=30)
    check(
        task.state == State.TASK_STATE_SUCCEEDED and task.result == b"waited",
        f"wait returned {state_name(task.state)} result {task.result!r}, want SUCCEEDED b'waited'",
    )
    again = self.tb.wait(w, timeout=5)
    check(again.state == State.TASK_STATE_SUCCEEDED, f"second wait returned {state_name(again.state)}")
    x = self.tb.submit(q, b"x").task_id
    try:
        self.tb.wait(x, timeout=0.5)
        raise CaseFailed("the wait on x returned; want WaitTimeout")
    except WaitTimeout:
        pass
    tx = self.get_task(x)
    check(tx.state == State.TASK_STATE_READY, f"x is {state_name(tx.state)} after the timeout, want READY")
