"""The policy declared with a handler and TaskDef (docs/client-spec.md point 20): pure parts
here, the rest against a live broker at $TASKBROKER_ADDR (skipped without one)."""

from __future__ import annotations

import dataclasses
import os
import random
import threading
from collections import Counter

import pytest

from taskbroker import Client, QueuePolicy, TaskContext, TaskDef, TaskFailedError, Worker
from taskbroker.policy import apply_defaults, lease_plan
from taskbroker.v1 import broker_pb2

State = broker_pb2.TaskState
ADDR = os.environ.get("TASKBROKER_ADDR")
live = pytest.mark.skipif(not ADDR, reason="TASKBROKER_ADDR is not set; needs a live broker")


class InvalidAddress(Exception):
    pass


@dataclasses.dataclass
class Email:
    to: str


@dataclasses.dataclass
class Sent:
    to: str
    attempt: int


def test_only_the_unset_retry_fields_are_filled():
    table = {"emails": QueuePolicy(max_attempts=7, backoff=2).retry()}
    own = broker_pb2.TaskSpec(queue="emails", retry=broker_pb2.RetryPolicy(max_attempts=2))
    plain, kept, other = apply_defaults(
        table, [broker_pb2.TaskSpec(queue="emails"), own, broker_pb2.TaskSpec(queue="x")]
    )
    assert plain.retry.max_attempts == 7 and plain.retry.initial_backoff.seconds == 2
    assert kept.retry.max_attempts == 2 and kept.retry.initial_backoff.seconds == 2
    assert not other.HasField("retry")
    assert own.retry.max_attempts == 2 and not own.retry.HasField("initial_backoff"), "the caller's spec stays"


def test_a_non_retryable_type_or_cause_becomes_permanent():
    p = QueuePolicy(non_retryable=(InvalidAddress,))
    try:
        try:
            raise InvalidAddress("no @")
        except InvalidAddress as e:
            raise RuntimeError("send failed") from e
    except RuntimeError as wrapped:
        assert type(p.classify(wrapped)).__name__ == "PermanentError"
    assert isinstance(p.classify(ValueError("x")), ValueError)


def test_a_full_queue_is_left_out_and_the_batch_bounded():
    limits = {"slow": 2}
    assert lease_plan(["slow", "fast"], limits, Counter(), 4) == (["slow", "fast"], 2)
    assert lease_plan(["slow", "fast"], limits, Counter(slow=1), 4) == (["slow", "fast"], 1)
    assert lease_plan(["slow", "fast"], limits, Counter(slow=2), 4) == (["fast"], 4)


@pytest.fixture
def tb():
    with Client.from_env(ADDR) as client:
        yield client


@pytest.fixture
def queue(request) -> str:
    return f"test.python.{request.node.name}.{random.randrange(1 << 32)}"


@live
def test_handler_retry_defaults_reach_the_broker(tb, queue):
    worker = Worker(tb, poll_wait=1)

    @worker.handler(queue, max_attempts=7, backoff=42)
    def ok(ctx: TaskContext) -> None:
        return None

    plain = tb.get_task(tb.submit(queue, b"x").task_id)
    assert (plain.max_attempts, plain.retry.initial_backoff.seconds) == (7, 42)
    from taskbroker import retry_policy

    own = tb.get_task(tb.submit(queue, b"y", retry=retry_policy(2)).task_id)
    assert (own.max_attempts, own.retry.initial_backoff.seconds) == (2, 42), "the spec's own field wins"
    assert tb.get_task(tb.submit(queue + ".other", b"z").task_id).max_attempts == 3


@live
def test_a_non_retryable_error_ends_the_task_dead_at_attempt_one(tb, queue):
    worker = Worker(tb, poll_wait=1)

    @worker.handler(queue, max_attempts=5, non_retryable=(InvalidAddress,))
    def send(e: Email) -> None:
        raise InvalidAddress(f"bad address {e.to}")

    with worker, pytest.raises(TaskFailedError) as failed:
        tb.submit_and_wait(queue, Email(to="nobody"), timeout=30)
    task = failed.value.task
    assert task.state == State.TASK_STATE_DEAD
    assert (task.attempt, task.max_attempts) == (1, 5)
    assert "bad address nobody" in task.last_error


@live
def test_a_queue_with_its_own_concurrency_runs_one_at_a_time(tb, queue):
    ids = [tb.submit(queue, i).task_id for i in range(3)]
    lock, gate, first = threading.Lock(), threading.Semaphore(0), threading.Event()
    running = peak = 0
    worker = Worker(tb, concurrency=4, poll_wait=1)

    @worker.handler(queue, concurrency=1)
    def slow(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        first.set()
        gate.acquire()
        with lock:
            running -= 1
        return i

    with worker:
        assert first.wait(30)
        leased = [t for t in (tb.get_task(i) for i in ids) if t.state == State.TASK_STATE_LEASED]
        assert len(leased) == 1, "one slot: one lease"
        for _ in ids:
            gate.release()
        for i in ids:
            tb.wait(i, timeout=30)
    assert peak == 1


@live
def test_a_task_def_types_both_sides(tb, queue):
    emails = TaskDef(queue, Email, Sent, policy=QueuePolicy(max_attempts=4))
    worker = Worker(tb, poll_wait=1)

    @worker.task(emails)
    def send(e: Email, ctx: TaskContext) -> Sent:
        if not e.to:
            raise ValueError("no recipient")
        return Sent(to=e.to, attempt=ctx.attempt)

    with worker:
        assert emails.submit_and_wait(tb, Email(to="a@b.c"), timeout=30) == Sent(to="a@b.c", attempt=1)
    later = Client.from_env(ADDR)  # no worker on it: the definition's policy still holds
    try:
        t = later.get_task(emails.delay(later, Email(to="x"), 3600).task_id)
        assert (t.state, t.max_attempts) == (State.TASK_STATE_SCHEDULED, 4)
        import datetime

        at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=2)
        t = later.get_task(emails.run_at(later, Email(to="y"), at).task_id)
        assert abs(t.run_at.timestamp() - at.timestamp()) <= 1
    finally:
        later.close()
