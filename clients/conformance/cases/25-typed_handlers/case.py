"""The conformance case ``typed_handlers``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from conformance import Cases
from conformance_typed import Count, Done, Email, State, check, counter_points
from taskbroker import TaskContext, Worker


def typed_handlers(self: Cases, q: str) -> None:
    suffix = q.rsplit(".", 1)[-1]
    qa, qb = f"conf.python.typed_a.{suffix}", f"conf.python.typed_b.{suffix}"
    reader = InMemoryMetricReader()
    worker = Worker(
        self.tb, poll_wait=1, worker_id="conf-python", meter_provider=MeterProvider(metric_readers=[reader])
    )
    seen: list[tuple[str, str, str]] = []
    got: dict[str, Any] = {}
    lock = threading.Lock()

    @worker.handler(qa)
    def on_a(email: Email, ctx: TaskContext) -> Done:
        check(isinstance(email, Email), f"handler A got {type(email).__name__}, want Email")
        got[ctx.task_id] = email
        return Done(ok=True, n=email.n)

    @worker.handler(qb)
    def on_b(count: Count) -> dict[str, Any]:
        got["b"] = count
        return {"ok": True, "n": count.n}

    @worker.use
    def observe(ctx: TaskContext, call_next: Any) -> Any:
        try:
            result = call_next()
        except Exception:
            with lock:
                seen.append((ctx.task_id, ctx.queue, "error"))
            raise
        with lock:
            seen.append((ctx.task_id, ctx.queue, "success"))
        return result

    a = self.tb.submit(qa, Email(to="a@example.com", n=1)).task_id
    b = self.tb.submit(qb, Count(n=2)).task_id
    bad = self.tb.submit(qa, b"not json").task_id
    with worker:
        ta, tb_, tbad = self.tb.wait_all([a, b, bad], timeout=20)
    # The worker has drained: every outcome is recorded.
    check(
        ta.state == State.TASK_STATE_SUCCEEDED and tb_.state == State.TASK_STATE_SUCCEEDED,
        f"A is {State.Name(ta.state)} ({ta.last_error!r}), B is {State.Name(tb_.state)} ({tb_.last_error!r}), "
        "want both SUCCEEDED",
    )
    check(got.get(a) == Email(to="a@example.com", n=1), f"handler A received {got.get(a)!r}")
    check(got.get("b") == Count(n=2), f"handler B received {got.get('b')!r}")
    ra, rb = self.tb.get_result(ta, Done), self.tb.get_result(b, Done)
    check(ra == Done(True, 1) and rb == Done(True, 2), f"results {ra!r} and {rb!r}, want ok with n 1 and 2")
    check(
        (a, qa, "success") in seen and (b, qb, "success") in seen,
        f"the middleware saw {seen}, want A on {qa} and B on {qb}, both success",
    )
    check(
        tbad.state == State.TASK_STATE_DEAD and "Email" in tbad.last_error and tbad.attempt == 1,
        f"the payload 'not json' left its task {State.Name(tbad.state)} attempt {tbad.attempt} "
        f"last_error {tbad.last_error!r}, want DEAD at once naming Email",
    )
    tasks = counter_points(reader, "taskbroker.worker.tasks")
    for queue in (qa, qb):
        n = tasks.get((("outcome", "succeeded"), ("queue", queue)))
        check(n == 1, f"taskbroker.worker.tasks for {queue} succeeded is {n}, want 1 (all: {tasks})")
