"""The conformance case ``keys_and_replace``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

import datetime

from conformance import Cases
from conformance_results import State, check


def keys_and_replace(self: Cases, q: str) -> None:
    b = self.tb.submit(q, b"b", depends_on_keys=[(q, "k-a")]).task_id
    tb = self.tb.get_task(b)
    check(tb.state == State.TASK_STATE_BLOCKED, f"b is {State.Name(tb.state)}, want BLOCKED")
    now = datetime.datetime.now(datetime.timezone.utc)
    first = self.tb.submit(q, b"v1", key="digest", run_at=now + datetime.timedelta(hours=1))
    second = self.tb.submit(q, b"v2", key="digest", run_at=now, on_duplicate_key="replace_waiting")
    check(
        second.task_id == first.task_id and second.deduplicated and second.replaced,
        f"the second submit of digest answered {second.task_id} (deduplicated {second.deduplicated}, "
        f"replaced {second.replaced}), want {first.task_id} with both true",
    )
    d = first.task_id
    a = self.tb.submit(q, b"a", key="k-a").task_id
    got = self._lease(q, 0)
    ids = sorted(t.task_id for t in got)
    check(ids == sorted([a, d]), f"the first Lease returned {ids}, want exactly a {a} and d {d}")
    for t in got:
        if t.task_id == d:
            check(t.payload == b"v2", f"d was leased with payload {t.payload!r}, want v2")
            self._complete(t)
        else:
            self._complete(t, b"a-result")
    tb = self.tb.get_task(b)
    check(tb.state == State.TASK_STATE_READY, f"after a's Complete b is {State.Name(tb.state)}, want READY")
    got = self._lease(q, 5)
    check(
        len(got) == 1 and got[0].task_id == b,
        f"the second Lease returned {[t.task_id for t in got]}, want exactly b {b}",
    )
    results = dict(got[0].dependency_results)
    check(
        results == {a: b"a-result"},
        f"b was leased with dependency_results {results}, want {{{a}: a-result}}",
    )
    self._complete(got[0])
