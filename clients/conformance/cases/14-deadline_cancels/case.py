"""The conformance case ``deadline_cancels``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

import datetime
import threading

from conformance import Cases
from conformance_spec import check


def deadline_cancels(self: Cases, q: str) -> None:
    deadline = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)
    self.tb.submit(q, deadline=deadline)
    reason: list[str | None] = []
    done = threading.Event()

    def handler(ctx):  # type: ignore[no-untyped-def]
        ctx.cancelled.wait(20)
        reason.append(ctx.cancel_reason)
        done.set()
        raise RuntimeError("cancelled")

    with self._worker(q, handler):
        check(done.wait(25), "the handler never ran or never returned")
    check(reason == ["deadline"], f"cancel reason {reason}, want ['deadline']")
