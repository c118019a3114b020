"""The conformance case ``drain_on_sigterm``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

import os
import signal
import threading
import time

from conformance import Cases
from conformance_spec import State, check


def drain_on_sigterm(self: Cases, q: str) -> None:
    a = self.tb.submit(q, b"a").task_id
    running, release = threading.Event(), threading.Event()
    ids: list[str] = []

    def handler(ctx):  # type: ignore[no-untyped-def]
        running.set()
        release.wait(20)
        return b"done"

    def operator() -> None:
        if not running.wait(20):
            return
        ids.append(self.tb.submit(q, b"b").task_id)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)  # the signal handler runs on the main thread; let it stop leasing
        release.set()

    w = self._worker(q, handler, concurrency=1)
    th = threading.Thread(target=operator, daemon=True)
    th.start()
    w.run()  # main thread: SIGTERM stops it
    th.join(5)
    check(running.is_set() and ids, "the handler never ran")
    sa, sb = self._get(a).state, self._get(ids[0]).state
    check(sa == State.TASK_STATE_SUCCEEDED, f"a is {State.Name(sa)}, want SUCCEEDED")
    check(sb == State.TASK_STATE_READY, f"b is {State.Name(sb)}, want READY")
