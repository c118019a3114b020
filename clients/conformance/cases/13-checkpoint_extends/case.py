"""The conformance case ``checkpoint_extends``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

import datetime
import time

from conformance import Cases
from conformance_spec import State, check


def checkpoint_extends(self: Cases, q: str) -> None:
    task_id = self.tb.submit(q).task_id
    seen: dict[str, datetime.datetime] = {}

    def handler(ctx):  # type: ignore[no-untyped-def]
        seen["leased"] = ctx.lease_expires_at
        time.sleep(0.1)
        ctx.checkpoint(b"half")
        seen["after"] = ctx.lease_expires_at
        return b"ok"

    with self._worker(q, handler, lease_duration=4):
        t = self._wait_state(task_id, State.TASK_STATE_SUCCEEDED)
    check(t.state == State.TASK_STATE_SUCCEEDED, f"state {State.Name(t.state)}, want SUCCEEDED")
    check(
        seen.get("after") is not None and seen["after"] > seen["leased"],
        f"expiry {seen.get('leased')} -> {seen.get('after')}: the checkpoint did not extend the lease",
    )
