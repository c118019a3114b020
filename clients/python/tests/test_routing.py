"""Routing in the Python client: the builders (pure), and the Worker's labels and
prefer_same_worker against a live broker at $TASKBROKER_ADDR (skipped without one)."""

from __future__ import annotations

import asyncio
import os
import random
import threading

import pytest

from taskbroker import AsyncClient, Client, RetryableError, TaskContext, Worker, routing
from taskbroker.client import duration
from taskbroker.v1 import admin_pb2, broker_pb2

ADDR = os.environ.get("TASKBROKER_ADDR")
live = pytest.mark.skipif(not ADDR, reason="TASKBROKER_ADDR is not set; needs a live broker")


def test_builders_fill_the_messages() -> None:
    t = routing.target("w-1", {"gpu": "a100"})
    assert t.worker_id == "w-1" and dict(t.labels) == {"gpu": "a100"}
    soft = routing.sticky("soft", timeout=60)
    assert soft.strategy == broker_pb2.STICKY_STRATEGY_SOFT and soft.timeout.seconds == 60
    hard = routing.sticky("hard")
    assert hard.strategy == broker_pb2.STICKY_STRATEGY_HARD and not hard.HasField("timeout")
    f = routing.fanout(6, distinct_workers=True)
    assert f.copies == 6 and f.distinct_workers


def test_builders_refuse_what_the_broker_would() -> None:
    with pytest.raises(ValueError, match="worker_id or labels"):
        routing.target()
    with pytest.raises(ValueError, match="'soft' or 'hard'"):
        routing.sticky("sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no timeout"):
        routing.sticky("hard", timeout=5)
    with pytest.raises(ValueError, match="1 to 1000"):
        routing.fanout(0)
    with pytest.raises(ValueError, match="at most 32 labels"):
        Worker("127.0.0.1:1", ["q"], lambda ctx: b"", labels={f"k{i}": "v" for i in range(33)})


@live
def test_labelled_worker_takes_the_targeted_task_and_a_retry_stays_on_it() -> None:
    queue = f"test.python.routing.{random.randrange(1 << 32)}"
    with Client.from_env(ADDR) as tb:
        sub = tb.submit(
            queue,
            b"x",
            target=routing.target(labels={"gpu": "a100"}),
            retry=broker_pb2.RetryPolicy(max_attempts=3, initial_backoff=duration(0)),
        )
        attempts: list[int] = []
        done = threading.Event()

        def handler(ctx: TaskContext) -> bytes:
            attempts.append(ctx.attempt)
            if ctx.attempt == 1:
                raise RetryableError("local files are here", prefer_same_worker=True)
            done.set()
            return b"ok"

        with Worker(tb, [queue], handler, worker_id="test-python-gpu", poll_wait=1, labels={"gpu": "a100"}):
            assert done.wait(15), f"the handler ran attempts {attempts}"
        task = tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=sub.task_id), timeout=10).task
        assert attempts == [1, 2]
        assert task.state == broker_pb2.TASK_STATE_SUCCEEDED
        # The registry saw the worker with its labels.
        seen = tb.list_workers(queue=queue, labels={"gpu": "a100"})
        assert [w.worker_id for w in seen] == ["test-python-gpu"]
        assert dict(seen[0].labels) == {"gpu": "a100"}
        assert tb.get_worker("test-python-gpu").worker.worker_id == "test-python-gpu"


@live
def test_fanout_submit_returns_every_copy() -> None:
    queue = f"test.python.fanout.{random.randrange(1 << 32)}"
    with Client.from_env(ADDR) as tb:
        res = tb.submit(queue, b"x", fanout=routing.fanout(3, distinct_workers=True))
        assert len(res.copy_task_ids) == 3 and res.copy_task_ids[0] == res.task_id


@live
def test_async_client_lists_a_labelled_worker() -> None:
    queue = f"test.python.aio-routing.{random.randrange(1 << 32)}"

    async def main() -> None:
        async with AsyncClient.from_env(ADDR) as tb:
            stub = tb.broker
            await stub.Lease(
                broker_pb2.LeaseRequest(worker_id="test-python-aio", queues=[queue], max_tasks=1, labels={"zone": "b"}),
                timeout=10,
            )
            seen = await tb.list_workers(queue=queue)
            assert [(w.worker_id, dict(w.labels)) for w in seen] == [("test-python-aio", {"zone": "b"})]
            got = await tb.get_worker("test-python-aio")
            assert got.worker.worker_id == "test-python-aio"

    asyncio.run(main())
