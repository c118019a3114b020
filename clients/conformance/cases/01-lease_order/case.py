"""The conformance case ``lease_order``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

from conformance import Cases, S, check, ts_in


def lease_order(self: Cases, q: str) -> None:
    specs = [
        S.TaskSpec(queue=q, payload=b"a", priority=0),
        S.TaskSpec(queue=q, payload=b"b", priority=5),
        S.TaskSpec(queue=q, payload=b"c", priority=5, deadline=ts_in(2 * 3600)),
        S.TaskSpec(queue=q, payload=b"d", priority=5, deadline=ts_in(3600)),
        S.TaskSpec(queue=q, payload=b"e", priority=-1),
        S.TaskSpec(queue=q, payload=b"f", priority=10, run_at=ts_in(3600)),
    ]
    self.tb.broker.Submit(S.SubmitRequest(tasks=specs), timeout=10)
    tasks = self.lease(q, 10, 30, 0)
    got = [t.payload.decode() for t in tasks]
    check(got == ["d", "c", "b", "a", "e"], f"leased payloads {got}, want ['d', 'c', 'b', 'a', 'e']")
    for t in tasks:
        check(t.attempt == 1, f"task {t.payload!r}: attempt {t.attempt}, want 1")
    for t in tasks:
        self.complete(t)
