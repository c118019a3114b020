"""Limit buckets and cooldowns in the Python client: the cooldown a handler asks for (on a
test context, no broker), and against a live broker at $TASKBROKER_ADDR (skipped without one)
the Worker's FailRequest.cooldown, ListCooldowns / LiftCooldown, and a bucket's settings from
definition to deletion."""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import threading

import grpc
import pytest

from taskbroker import (
    AsyncClient,
    AsyncTaskContext,
    Bucket,
    Client,
    Cooldown,
    RetryableError,
    TaskContext,
    TaskState,
    Worker,
)
from taskbroker.buckets import lift_request, update_request
from taskbroker.testing import AsyncTestContext, TestContext
from taskbroker.v1 import broker_pb2
from taskbroker.worker import _fail_request

ADDR = os.environ.get("TASKBROKER_ADDR")
live = pytest.mark.skipif(not ADDR, reason="TASKBROKER_ADDR is not set; needs a live broker")


def _rand() -> str:
    return f"{random.getrandbits(32):08x}"


def test_a_test_context_records_the_cooldown_a_handler_asks_for() -> None:
    def rate_limited(ctx: TaskContext) -> bytes:
        raise RetryableError("429 Too Many Requests", cool_down_key=datetime.timedelta(seconds=90))

    out = TestContext("calls", b"x", key="k").run(rate_limited)
    assert (out.retryable, out.cool_down_key, out.cool_down_bucket) == (True, 90.0, None)
    assert out.error_message == "429 Too Many Requests"

    async def bucket_full(ctx: AsyncTaskContext) -> bytes:
        raise RetryableError("quota", cool_down_bucket=2.5)

    async def go() -> None:
        out = await AsyncTestContext("calls", b"x").run(bucket_full)
        assert (out.cool_down_key, out.cool_down_bucket) == (None, 2.5)

    asyncio.run(go())

    def plain(ctx: TaskContext) -> bytes:
        raise RetryableError("plain")

    out = TestContext("calls", b"x").run(plain)
    assert (out.retryable, out.cool_down_key, out.cool_down_bucket) == (True, None, None)


def test_the_fail_request_carries_the_cooldown_and_one_scope_only() -> None:
    ctx = TestContext("calls", b"x")
    req = _fail_request(ctx, RetryableError("429", retry_after=1, cool_down_key=90))
    assert req.cooldown.scope == broker_pb2.COOLDOWN_SCOPE_CONCURRENCY_KEY and req.cooldown.duration.seconds == 90
    assert req.retry_after.seconds == 1
    req = _fail_request(ctx, RetryableError("quota", cool_down_bucket=datetime.timedelta(milliseconds=1500)))
    assert req.cooldown.scope == broker_pb2.COOLDOWN_SCOPE_BUCKET
    assert req.cooldown.duration.ToNanoseconds() == 1_500_000_000
    assert not _fail_request(ctx, RetryableError("plain")).HasField("cooldown")
    with pytest.raises(ValueError, match="not both"):
        RetryableError("x", cool_down_key=1, cool_down_bucket=1)


def test_update_and_lift_requests_name_what_they_change() -> None:
    req = update_request("b", rate_limit=20, burst=40)
    assert list(req.update_mask.paths) == ["rate_limit"]
    assert (req.config.rate_limit.per_second, req.config.rate_limit.burst) == (20, 40)
    req = update_request("b", rate_limit=0, max_concurrent=0)
    assert list(req.update_mask.paths) == ["rate_limit", "max_concurrent"]
    assert not req.config.HasField("rate_limit")
    with pytest.raises(ValueError, match="rate_limit or max_concurrent"):
        update_request("b")
    assert lift_request(queue="q", key="k").concurrency_key == "k"
    assert lift_request(bucket="b").bucket == "b"
    for bad in ({}, {"queue": "q"}, {"key": "k"}, {"queue": "q", "key": "k", "bucket": "b"}):
        with pytest.raises(ValueError, match="queue and key, or bucket"):
            lift_request(**bad)


@live
def test_a_handler_cools_its_key_down_and_lifting_it_lets_the_next_task_run() -> None:
    queue, bucket = f"test.python.cooldown.{_rand()}", f"test.python.b.{_rand()}"
    with Client.from_env(ADDR) as tb:
        first = tb.submit(queue, b"1", concurrency_key="acme", bucket=bucket).task_id
        assert tb.get_task(first).bucket == bucket  # Task.bucket reads through to the message
        failed = threading.Event()
        ran: list[str] = []

        def handler(ctx: TaskContext) -> bytes:
            if ctx.task_id == first:
                failed.set()
                raise RetryableError("429 Too Many Requests", cool_down_key=600)
            ran.append(ctx.task_id)
            return b"ran"

        # Leaving the with-block stops the worker once the handler has returned and its Fail
        # is answered, so the cooldown is stored by then.
        with Worker(tb, [queue], handler, poll_wait=1):
            assert failed.wait(15), "the first task was not leased"

        cooldowns = tb.list_cooldowns(queue=queue)
        assert [(c.scope, c.queue, c.concurrency_key, c.bucket, c.task_id) for c in cooldowns] == [
            ("CONCURRENCY_KEY", queue, "acme", "", first)
        ]
        until = cooldowns[0].until
        assert isinstance(cooldowns[0], Cooldown) and until is not None
        assert until > datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5)
        retry = tb.get_task(first)
        assert retry.attempt == 1 and retry.run_at is not None and retry.run_at >= until

        second = tb.submit(queue, b"2", concurrency_key="acme", bucket=bucket).task_id
        gates = tb.explain_task(second).gates
        assert [g.kind for g in gates] == ["COOLDOWN"] and gates[0].until == until

        assert tb.lift_cooldown(queue=queue, key="acme") is True
        assert tb.list_cooldowns(queue=queue) == []
        assert tb.lift_cooldown(queue=queue, key="acme") is False
        with Worker(tb, [queue], handler, poll_wait=1):
            done = tb.wait(second, timeout=30)
        assert (done.state, done.result, ran) == (TaskState.SUCCEEDED, b"ran", [second])


@live
def test_a_handler_cools_its_bucket_down() -> None:
    queue, bucket = f"test.python.cooldown.{_rand()}", f"test.python.b.{_rand()}"
    with Client.from_env(ADDR) as tb:
        task_id = tb.submit(queue, b"x", bucket=bucket).task_id
        failed = threading.Event()

        def handler(ctx: TaskContext) -> bytes:
            failed.set()
            raise RetryableError("quota exhausted", cool_down_bucket=datetime.timedelta(minutes=10))

        with Worker(tb, [queue], handler, poll_wait=1):
            assert failed.wait(15), "the task was not leased"
        held = tb.list_cooldowns(bucket=bucket)
        assert [(c.scope, c.bucket, c.task_id) for c in held] == [("BUCKET", bucket, task_id)]
        assert tb.lift_cooldown(bucket=bucket) is True
        assert tb.list_cooldowns(bucket=bucket) == []


@live
def test_a_bucket_from_definition_to_deletion() -> None:
    name = f"test.python.partner-api.{_rand()}"
    with Client.from_env(ADDR) as tb:
        b = tb.update_bucket(name, rate_limit=20, burst=40, max_concurrent=5)
        assert isinstance(b, Bucket)
        assert (b.name, b.rate_limit, b.burst, b.max_concurrent, b.leases_held) == (name, 20.0, 40, 5, 0)
        assert b.updated_at is not None and b.cooldown_until is None
        assert tb.get_bucket(name) == b
        assert name in [x.name for x in tb.list_buckets()]

        # Only what is given changes.
        b = tb.update_bucket(name, max_concurrent=0)
        assert (b.rate_limit, b.burst, b.max_concurrent) == (20.0, 40, 0)
        b = tb.update_bucket(name, rate_limit=0)
        assert (b.rate_limit, b.max_concurrent) == (None, 0)

        tb.delete_bucket(name)
        assert name not in [x.name for x in tb.list_buckets()]
        for call in (tb.get_bucket, tb.delete_bucket):
            with pytest.raises(grpc.RpcError) as err:
                call(name)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
        with pytest.raises(grpc.RpcError) as err:
            tb.update_bucket("no spaces allowed", max_concurrent=1)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        with pytest.raises(grpc.RpcError) as err:
            tb.update_bucket(name, rate_limit=-1)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]


@live
def test_the_async_client_answers_the_same() -> None:
    async def main() -> None:
        name, queue = f"test.python.aio-bucket.{_rand()}", f"test.python.aio-cooldown.{_rand()}"
        async with AsyncClient.from_env(ADDR) as tb:
            b = await tb.update_bucket(name, max_concurrent=3)
            assert (b.name, b.max_concurrent, b.rate_limit) == (name, 3, None)
            assert await tb.get_bucket(name) == b
            assert name in [x.name for x in await tb.list_buckets()]
            assert await tb.list_cooldowns(queue=queue) == []
            assert await tb.lift_cooldown(queue=queue, key="k") is False
            await tb.delete_bucket(name)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await tb.delete_bucket(name)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND

    asyncio.run(main())
