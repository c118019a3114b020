"""Typed handlers, middleware, metrics and fail_fast on the Worker and the AsyncWorker, against
a live broker at $TASKBROKER_ADDR (skipped without one)."""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import threading
from typing import Any, TypedDict

import pydantic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from taskbroker import (
    AsyncClient,
    AsyncTaskContext,
    AsyncWorker,
    Client,
    ConnectOptions,
    PermanentError,
    TaskContext,
    TaskFailedError,
    Worker,
    WorkerStoppedError,
    retry_policy,
)
from taskbroker.v1 import admin_pb2, broker_pb2

ADDR = os.environ.get("TASKBROKER_ADDR")
pytestmark = pytest.mark.skipif(not ADDR, reason="TASKBROKER_ADDR is not set; needs a live broker")
State = broker_pb2.TaskState


class Resize(pydantic.BaseModel):
    url: str
    width: int


class Sum(TypedDict):
    a: int
    b: int


def queue(name: str) -> str:
    return f"test.python.typed.{name}.{random.randrange(1 << 32)}"


def points(reader: InMemoryMetricReader, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
    out: dict[tuple[tuple[str, Any], ...], Any] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    for p in m.data.data_points:
                        out[tuple(sorted((p.attributes or {}).items()))] = p
    return out


def test_sync_typed_handlers_middleware_and_metrics() -> None:
    qa, qb = queue("resize"), queue("sum")
    reader = InMemoryMetricReader()
    with Client.from_env(ADDR) as tb:
        worker = Worker(tb, poll_wait=datetime.timedelta(seconds=1), meter_provider=MeterProvider(metric_readers=[reader]))
        seen: list[tuple[str, str]] = []
        lock = threading.Lock()

        @worker.handler(qa)
        def resize(job: Resize, ctx: TaskContext) -> dict[str, Any]:
            if job.width < 0:
                raise KeyError("negative width")
            return {"url": job.url, "width": job.width, "attempt": ctx.attempt}

        @worker.handler(qb)
        def add(s: Sum) -> int:
            return s["a"] + s["b"]

        @worker.use
        def record(ctx: TaskContext, call_next: Any) -> Any:
            with lock:
                seen.append((ctx.queue, "outer"))
            return call_next()

        @worker.use
        def permanent(ctx: TaskContext, call_next: Any) -> Any:
            try:
                return call_next()
            except KeyError as err:
                raise PermanentError(f"bad job: {err}") from err

        ok = tb.submit(qa, Resize(url="u", width=3)).task_id
        bad = tb.submit(qa, {"url": "u", "width": -1}, retry=retry_policy(3, initial_backoff=0)).task_id
        total = tb.submit(qb, {"a": 2, "b": 5}).task_id
        wrong = tb.submit(qb, {"a": 2}).task_id
        with worker:
            tok, tbad, ttotal, twrong = tb.wait_all([ok, bad, total, wrong], timeout=20)
        assert tb.get_result(tok, dict) == {"url": "u", "width": 3, "attempt": 1}
        assert tb.get_result(ttotal, int) == 7
        # The middleware made the KeyError permanent: DEAD after one attempt of three.
        assert tbad.state == State.TASK_STATE_DEAD and tbad.attempt == 1 and "bad job" in tbad.last_error
        assert twrong.state == State.TASK_STATE_DEAD and twrong.attempt == 1
        assert f"queue {qb}: payload is not a valid Sum: missing field b" == twrong.last_error
        with pytest.raises(TaskFailedError, match="ended DEAD: bad job"):
            tb.get_result(bad, dict)
        assert sorted(seen) == sorted([(qa, "outer")] * 2 + [(qb, "outer")] * 2)

        tasks = {k: p.value for k, p in points(reader, "taskbroker.worker.tasks").items()}
        assert tasks == {
            (("outcome", "succeeded"), ("queue", qa)): 1,
            (("outcome", "failed"), ("queue", qa)): 1,
            (("outcome", "succeeded"), ("queue", qb)): 1,
            (("outcome", "failed"), ("queue", qb)): 1,
        }
        durations = points(reader, "taskbroker.worker.task.duration")
        assert durations[(("outcome", "succeeded"), ("queue", qa))].count == 1
        calls = {dict(k)["rpc"]: p.value for k, p in points(reader, "taskbroker.worker.settle.calls").items()}
        assert calls.get("Fail") == 2 and calls.get("Complete", 0) + calls.get("CompleteMany", 0) >= 1


def test_async_typed_handlers_middleware_and_metrics() -> None:
    async def main() -> None:
        qa = queue("aio")
        reader = InMemoryMetricReader()
        async with AsyncClient.from_env(ADDR) as tb:
            worker = AsyncWorker(tb, poll_wait=1, meter_provider=MeterProvider(metric_readers=[reader]))
            seen: list[tuple[str, str, str]] = []

            @worker.handler(qa)
            async def resize(job: Resize, ctx: AsyncTaskContext) -> Resize:
                await asyncio.sleep(0)
                return Resize(url=job.url + "#" + ctx.queue, width=job.width * 2)

            @worker.use
            async def observe(ctx: AsyncTaskContext, call_next: Any) -> Any:
                try:
                    result = await call_next()
                except Exception as err:
                    seen.append((ctx.task_id, ctx.queue, type(err).__name__))
                    raise
                seen.append((ctx.task_id, ctx.queue, "success"))
                return result

            ok = (await tb.submit(qa, Resize(url="u", width=3))).task_id
            bad = (await tb.submit(qa, b"{}")).task_id
            async with worker:
                tok, tbad = await tb.wait_all([ok, bad], timeout=20)
            assert await tb.get_result(tok, Resize) == Resize(url=f"u#{qa}", width=6)
            assert tbad.state == State.TASK_STATE_DEAD and tbad.last_error.startswith(
                f"queue {qa}: payload is not a valid Resize: "
            )
            assert sorted(seen) == sorted([(ok, qa, "success"), (bad, qa, "PayloadError")])
            tasks = {k: p.value for k, p in points(reader, "taskbroker.worker.tasks").items()}
            assert tasks == {(("outcome", "succeeded"), ("queue", qa)): 1, (("outcome", "failed"), ("queue", qa)): 1}

    asyncio.run(main())


def test_a_worker_with_no_handler_or_two_for_a_queue_is_refused() -> None:
    with Client.from_env(ADDR) as tb:
        w = Worker(tb)
        with pytest.raises(ValueError, match="no queues"):
            w.run(handle_signals=False)
        w.handle("q", lambda: None)
        with pytest.raises(ValueError, match="already has a handler"):
            w.handle("q", lambda: None)
        with pytest.raises(ValueError, match="queues and a handler together"):
            Worker(tb, ["q"])

        async def coroutine() -> None: ...

        with pytest.raises(TypeError, match="run it on an AsyncWorker"):
            w.handle("q2", coroutine)
    aw = AsyncWorker(ADDR or "")

    def not_async() -> None: ...

    with pytest.raises(TypeError, match="async def"):
        aw.handle("q", not_async)  # type: ignore[arg-type]


def _mismatched() -> tuple[ConnectOptions, str]:
    """Options for this broker with the TLS setting flipped, and what fail_fast should say."""
    o = ConnectOptions.from_env(ADDR)
    if o.tls is None:
        return ConnectOptions(o.target, token=o.token, tls=True), "does not speak TLS"
    return ConnectOptions(o.target, token=o.token), "closed the connection before answering"


def test_fail_fast_stops_a_worker_on_a_tls_mismatch_in_one_line() -> None:
    o, says = _mismatched()
    with Client(o.target, token=o.token, tls=o.tls) as tb:
        w = Worker(tb, [queue("tls")], lambda ctx: b"", poll_wait=1, fail_fast=True)
        out: list[BaseException] = []

        def run() -> None:
            try:
                w.run(handle_signals=False)
            except BaseException as err:  # noqa: BLE001 -- checked below
                out.append(err)

        th = threading.Thread(target=run, daemon=True)
        th.start()
        th.join(20)
        if th.is_alive():
            w.stop(wait=False)
            pytest.fail("the fail_fast worker still runs after 20 s")
    assert out and isinstance(out[0], WorkerStoppedError), out
    assert says in str(out[0]) and "\n" not in str(out[0])


def test_fail_fast_stops_an_async_worker_on_a_tls_mismatch() -> None:
    o, says = _mismatched()

    async def handler(ctx: AsyncTaskContext) -> bytes:
        return b""

    async def main() -> None:
        w = AsyncWorker(AsyncClient(o.target, token=o.token, tls=o.tls), [queue("tls")], handler, poll_wait=1, fail_fast=True)
        with pytest.raises(WorkerStoppedError, match=says):
            await asyncio.wait_for(w.run(handle_signals=False), 20)

    asyncio.run(main())


def test_an_operators_cancel_is_counted_as_cancelled() -> None:
    q = queue("cancel")
    reader = InMemoryMetricReader()
    started = threading.Event()
    with Client.from_env(ADDR) as tb:
        worker = Worker(tb, poll_wait=1, lease_duration=3, meter_provider=MeterProvider(metric_readers=[reader]))

        @worker.handler(q)
        def wait_for_cancel(ctx: TaskContext) -> None:
            started.set()
            ctx.cancelled.wait(20)
            raise RuntimeError(f"stopped: {ctx.cancel_reason}")

        task_id = tb.submit(q, None).task_id
        with worker:
            assert started.wait(20)
            tb.admin.CancelTask(admin_pb2.CancelTaskRequest(task_id=task_id), timeout=10)
            with pytest.raises(TaskFailedError) as err:
                tb.wait(task_id, timeout=20)
        t = err.value.task
        assert t.state == State.TASK_STATE_CANCELLED
        tasks = {k: p.value for k, p in points(reader, "taskbroker.worker.tasks").items()}
        assert tasks == {(("outcome", "cancelled"), ("queue", q)): 1}
