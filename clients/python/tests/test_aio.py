"""AsyncWorker and AsyncClient against a live broker at $TASKBROKER_ADDR (skipped without one)."""

from __future__ import annotations

import asyncio
import datetime
import os
import random

import grpc
import pytest

from taskbroker import AsyncClient, AsyncTaskContext, AsyncWorker, WaitTimeout, WorkerStoppedError, is_lease_lost
from taskbroker.v1 import admin_pb2, broker_pb2

ADDR = os.environ.get("TASKBROKER_ADDR")
pytestmark = pytest.mark.skipif(not ADDR, reason="TASKBROKER_ADDR is not set; needs a live broker")
SUCCEEDED = broker_pb2.TaskState.TASK_STATE_SUCCEEDED


def queue(name: str) -> str:
    return f"test.python.aio.{name}.{random.randrange(1 << 32)}"


async def wait_state(tb: AsyncClient, task_id: str, want: int) -> admin_pb2.Task:
    for _ in range(400):
        t = (await tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=10)).task
        if t.state == want:
            return t
        await asyncio.sleep(0.05)
    return t


def test_async_handlers_complete_tasks_and_checkpoints_extend_the_lease() -> None:
    async def main() -> None:
        q = queue("complete")
        async with AsyncClient.from_env(ADDR) as tb:
            task_id = (await tb.submit(q, b"x")).task_id
            seen = []

            async def handler(ctx: AsyncTaskContext) -> bytes:
                before = ctx.lease_expires_at
                await asyncio.sleep(0.05)
                await ctx.checkpoint(b"half")
                seen.append(ctx.lease_expires_at > before)
                return b"done:" + ctx.payload

            async with AsyncWorker(tb, [q], handler, poll_wait=1, lease_duration=4):
                t = await wait_state(tb, task_id, SUCCEEDED)
            assert t.state == SUCCEEDED and t.result == b"done:x"
            assert seen == [True]

    asyncio.run(main())


def test_the_deadline_cancels_an_async_handler() -> None:
    async def main() -> None:
        q = queue("deadline")
        async with AsyncClient.from_env(ADDR) as tb:
            deadline = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
            await tb.submit(q, deadline=deadline)
            reasons: list[str | None] = []
            done = asyncio.Event()

            async def handler(ctx: AsyncTaskContext) -> None:
                try:
                    await asyncio.sleep(20)
                finally:
                    reasons.append(ctx.cancel_reason)
                    done.set()

            async with AsyncWorker(tb, [q], handler, poll_wait=1):
                await asyncio.wait_for(done.wait(), 15)
            assert reasons == ["deadline"]

    asyncio.run(main())


def test_a_refused_lease_stops_the_async_worker() -> None:
    async def main() -> None:
        async with AsyncClient.from_env(ADDR) as tb:

            async def handler(ctx: AsyncTaskContext) -> None:
                return None

            with pytest.raises(WorkerStoppedError) as err:
                await asyncio.wait_for(AsyncWorker(tb, ["has space"], handler, poll_wait=1).run(handle_signals=False), 15)
            assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT

    asyncio.run(main())


def test_lease_lost_is_read_from_async_errors() -> None:
    async def main() -> None:
        q = queue("lost")
        async with AsyncClient.from_env(ADDR) as tb:
            await tb.submit(q)
            leased = await tb.broker.Lease(
                broker_pb2.LeaseRequest(worker_id="test-python", queues=[q], max_tasks=1), timeout=10
            )
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await tb.broker.Complete(
                    broker_pb2.CompleteRequest(task_id=leased.tasks[0].task_id, lease_token="stale"), timeout=10
                )
            assert is_lease_lost(err.value)

    asyncio.run(main())


def test_an_async_worker_with_labels_runs_the_tasks_targeted_at_them() -> None:
    # Routing: labels go with every Lease.
    async def main() -> None:
        q = queue("labels")
        async with AsyncClient.from_env(ADDR) as tb:
            spec = broker_pb2.TaskSpec(queue=q, payload=b"gpu", target=broker_pb2.Target(labels={"gpu": "a100"}))
            reply = await tb.broker.Submit(broker_pb2.SubmitRequest(tasks=[spec]), timeout=10)
            task_id = reply.results[0].task_id

            async def handler(ctx: AsyncTaskContext) -> bytes:
                return ctx.payload

            async with AsyncWorker(tb, [q], handler, poll_wait=1, labels={"gpu": "a100"}):
                t = await wait_state(tb, task_id, SUCCEEDED)
            assert t.state == SUCCEEDED and t.result == b"gpu"

    asyncio.run(main())


def test_async_lease_next_runs_each_task_once_and_stops_cleanly() -> None:
    # lease_next: every settle brings the next task (concurrency 1: one Lease for the first);
    # with lease_next=False none comes that way; a stop mid-stream leaves the rest READY.
    async def main() -> None:
        async with AsyncClient.from_env(ADDR) as tb:
            for lease_next in (True, False):
                q = queue(f"next{lease_next}")
                specs = [broker_pb2.TaskSpec(queue=q, payload=str(i).encode()) for i in range(6)]
                reply = await tb.broker.Submit(broker_pb2.SubmitRequest(tasks=specs), timeout=10)
                ids = [r.task_id for r in reply.results]
                seen: list[bytes] = []

                async def handler(ctx: AsyncTaskContext) -> bytes:
                    seen.append(ctx.payload)
                    return ctx.payload

                worker = AsyncWorker(tb, [q], handler, poll_wait=1, concurrency=1, lease_next=lease_next)
                async with worker:
                    for task_id in ids:
                        assert (await wait_state(tb, task_id, SUCCEEDED)).state == SUCCEEDED
                assert sorted(seen) == sorted(s.payload for s in specs)
                assert worker.lease_next_tasks == (len(ids) - 1 if lease_next else 0)

            q = queue("nextstop")
            specs = [broker_pb2.TaskSpec(queue=q) for _ in range(8)]
            reply = await tb.broker.Submit(broker_pb2.SubmitRequest(tasks=specs), timeout=10)
            ids = [r.task_id for r in reply.results]
            ran: list[str] = []
            third, release = asyncio.Event(), asyncio.Event()

            async def blocking(ctx: AsyncTaskContext) -> bytes:
                ran.append(ctx.task_id)
                if len(ran) == 3:
                    third.set()
                    await release.wait()
                return b"ok"

            worker = AsyncWorker(tb, [q], blocking, poll_wait=1, concurrency=1)
            async with worker:
                await asyncio.wait_for(third.wait(), 15)
                worker.stop_soon()  # while the third task runs: its Complete leases nothing
                release.set()
            assert len(ran) == len(set(ran)) == 3
            for task_id in ids:
                t = (await tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=10)).task
                assert t.state == (SUCCEEDED if task_id in ran else broker_pb2.TaskState.TASK_STATE_READY)

    asyncio.run(main())


def test_an_async_worker_made_before_the_loop_runs_in_it() -> None:
    # The channel is made on first use, inside the loop that runs the worker; one made in
    # __init__ belonged to no running loop and failed on the first Lease.
    q = queue("early")
    done: list[bytes] = []

    async def handler(ctx: AsyncTaskContext) -> bytes:
        done.append(ctx.payload)
        worker.stop_soon()
        return b"ok"

    # Made before asyncio.run, as the worker's own client would be from a target string;
    # from the environment, so the secure run's TLS and token apply.
    early = AsyncClient.from_env(ADDR)
    worker = AsyncWorker(early, [q], handler, poll_wait=1)

    async def main() -> None:
        async with early, AsyncClient.from_env(ADDR) as tb:
            await tb.submit(q, b"early")
            await asyncio.wait_for(worker.run(handle_signals=False), 20)

    asyncio.run(main())
    assert done == [b"early"]


def test_async_wait_streams_carry_the_token() -> None:
    """WatchTasks (a server stream) goes through the same token as the unary calls: with
    --secure a stream without it is UNAUTHENTICATED."""

    async def main() -> None:
        q = queue("wait")
        async with AsyncClient.from_env(ADDR) as tb:
            task_id = (await tb.submit(q, b"x")).task_id
            t = (await tb.broker.Lease(
                broker_pb2.LeaseRequest(worker_id="test-python", queues=[q], max_tasks=1), timeout=10
            )).tasks[0]
            await tb.broker.Complete(
                broker_pb2.CompleteRequest(task_id=t.task_id, lease_token=t.lease_token, result=b"r"), timeout=10
            )
            done = await tb.wait(task_id, timeout=10)
            assert done.state == SUCCEEDED and done.result == b"r"
            # An unfinished task is followed on the stream itself until the timeout.
            waiting = (await tb.submit(q, b"y")).task_id
            with pytest.raises(WaitTimeout):
                await tb.wait(waiting, timeout=0.5)

    asyncio.run(main())
