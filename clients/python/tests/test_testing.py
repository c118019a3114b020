"""taskbroker.testing: handlers and producers tested with no broker (these run without one)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from taskbroker import (
    AsyncTaskContext,
    LeaseLostError,
    PermanentError,
    RetryableError,
    TaskContext,
    TaskFailedError,
    WaitTimeout,
    Worker,
)
from taskbroker.testing import AsyncFakeClient, AsyncTestContext, FakeClient, TestContext
from taskbroker.v1 import broker_pb2

State = broker_pb2.TaskState


@dataclasses.dataclass
class Import:
    rows: int


def import_rows(job: Import, ctx: TaskContext) -> dict:
    done = int(ctx.last_checkpoint or b"0")
    if job.rows < 0:
        raise PermanentError("negative row count")
    for row in range(done, job.rows):
        if ctx.cancelled.is_set():
            raise RetryableError("cancelled", retry_after=0)
        ctx.checkpoint(str(row + 1).encode())
    if ctx.metadata.get("flaky") and ctx.attempt < 2:
        raise RetryableError("upstream busy", retry_after=5)
    return {"rows": job.rows, "resumed_from": done}


def test_a_handler_runs_on_a_test_context_with_no_broker():
    ctx = TestContext("imports", {"rows": 3}, attempt=2, checkpoint=b"1", metadata={"tenant": "a"})
    assert isinstance(ctx, TaskContext)
    assert (ctx.queue, ctx.attempt, ctx.metadata, ctx.last_checkpoint) == ("imports", 2, {"tenant": "a"}, b"1")
    out = ctx.run(import_rows)
    assert out.succeeded and out.value == {"rows": 3, "resumed_from": 1}
    assert out.result == b'{"rows":3,"resumed_from":1}' or out.result == b'{"rows": 3, "resumed_from": 1}'
    assert ctx.checkpoints == [b"2", b"3"]
    assert ctx.cancel_checks == 2
    assert ctx.outcome is out

    out = TestContext("imports", {"rows": 1}, metadata={"flaky": "1"}).run(import_rows)
    assert (out.succeeded, out.retryable, out.retry_after, out.error_message) == (False, True, 5.0, "upstream busy")

    out = TestContext("imports", {"rows": -1}).run(import_rows)
    assert out.permanent and isinstance(out.error, PermanentError)

    # A payload that does not decode fails for good, as under the worker.
    out = TestContext("imports", b"not json").run(import_rows)
    assert out.permanent and "payload is not a valid" in out.error_message

    # An operator's cancel arrives in a checkpoint's answer.
    ctx = TestContext("imports", {"rows": 5}, cancel_at_checkpoint=2)
    out = ctx.run(import_rows)
    assert out.retryable and ctx.cancel_reason == "cancel_requested" and len(ctx.checkpoints) == 2

    ctx = TestContext("imports", {"rows": 5}, lose_lease_at_checkpoint=1)
    out = ctx.run(import_rows)
    assert isinstance(out.error, LeaseLostError) and ctx.lost and ctx.cancel_reason == "lease_lost"

    # Called directly, the handler raises exactly what it raises under the worker.
    with pytest.raises(PermanentError):
        import_rows(Import(rows=-1), TestContext("imports"))

    # An unexpected exception is retryable, with its type in the message.
    out = TestContext("x").run(lambda ctx: 1 / 0)
    assert out.retryable and out.error_message.startswith("ZeroDivisionError")


def test_an_async_handler_runs_on_an_async_test_context():
    async def handler(n: int, ctx: AsyncTaskContext) -> int:
        await ctx.checkpoint(b"half")
        if ctx.cancelled.is_set():
            raise PermanentError("stopped")
        return n * 2

    async def go() -> None:
        ctx = AsyncTestContext("double", 21)
        out = await ctx.run(handler)
        assert out.value == 42 and ctx.checkpoints == [b"half"]
        ctx = AsyncTestContext("double", 21)
        ctx.cancel()
        assert (await ctx.run(handler)).permanent

    asyncio.run(go())


def test_a_producer_and_a_worker_run_on_the_fake_client():
    fake = FakeClient()
    fake.handle("imports", import_rows)

    # Attempt 1 checkpoints both rows, then fails; attempt 2 resumes from the checkpoint.
    task = fake.submit_and_wait("imports", Import(rows=2), metadata={"flaky": "1"})
    assert task.state == State.TASK_STATE_SUCCEEDED and task.attempt == 2
    assert fake.get_result(task, dict) == {"rows": 2, "resumed_from": 2}
    assert [o.retryable for o in fake.outcomes(task.id)] == [True, False]

    # A permanent error: one attempt, DEAD; wait raises TaskFailedError.
    tid = fake.submit("imports", {"rows": -1}).task_id
    with pytest.raises(TaskFailedError) as err:
        fake.wait(tid)
    assert err.value.state_name == "DEAD" and err.value.last_error == "negative row count"
    assert fake.get_task(tid).attempt == 1

    # Retryable failures run until max_attempts.
    @fake.handler("down")
    def down(ctx: TaskContext) -> None:
        raise RuntimeError("unreachable")

    from taskbroker import retry_policy

    task = fake.wait_all([fake.submit("down", retry=retry_policy(max_attempts=4)).task_id])[0]
    assert (task.state, task.attempt) == (State.TASK_STATE_DEAD, 4)

    # Keys deduplicate; a queue with no handler waits until one is registered.
    a = fake.submit("imports", {"rows": 0}, key="k")
    b = fake.submit("imports", {"rows": 0}, key="k")
    assert b.deduplicated and a.task_id == b.task_id
    later = fake.submit("later", b"x").task_id
    with pytest.raises(WaitTimeout):
        fake.wait(later)

    def upper(payload: bytes) -> bytes:
        return payload.upper()

    fake.handle("later", upper)
    assert fake.run_pending() == 1
    assert fake.wait(later).result == b"X"

    # A dependency's result reaches the task that depends on it.
    @fake.handler("sum")
    def total(ctx: TaskContext) -> int:
        return sum(int(v) for v in ctx.dependency_results.values())

    one = fake.submit("later", b"1").task_id
    assert fake.get_result(fake.submit_and_wait("sum", depends_on=[one]), int) == 1


def test_a_workers_registered_handlers_run_on_the_fake_client():
    worker = Worker("127.0.0.1:1")  # not started: only its handlers are used
    worker.handle("imports", import_rows)
    seen: list[str] = []

    @worker.use
    def record(ctx, call_next):
        seen.append(ctx.task_id)
        return call_next()

    fake = FakeClient(worker=worker)
    task = fake.submit_and_wait("imports", {"rows": 1})
    assert task.state == State.TASK_STATE_SUCCEEDED and seen == [task.id]


def test_async_producers_and_workers_run_on_the_async_fake_client():
    fake = AsyncFakeClient()

    @fake.handler("double")
    async def double(n: int) -> int:
        if n < 0:
            raise PermanentError("negative")
        return n * 2

    async def go() -> None:
        task = await fake.submit_and_wait("double", 21)
        assert await fake.get_result(task, int) == 42
        with pytest.raises(TaskFailedError):
            await fake.submit_and_wait("double", -1)

    asyncio.run(go())
