"""Worker helper tests against a live broker at $TASKBROKER_ADDR (skipped without one;
scripts/conformance.sh python starts one)."""

from __future__ import annotations

import logging
import os
import random
import threading
import time

import pytest

from taskbroker import Client, PermanentError, RetryableError, TaskContext, Worker
from taskbroker.client import duration
from taskbroker.v1 import admin_pb2, broker_pb2

State = broker_pb2.TaskState
ADDR = os.environ.get("TASKBROKER_ADDR")
pytestmark = pytest.mark.skipif(not ADDR, reason="TASKBROKER_ADDR is not set; needs a live broker")


@pytest.fixture
def tb():
    with Client.from_env(ADDR) as client:
        yield client


@pytest.fixture
def queue(request) -> str:
    return f"test.python.{request.node.name}.{random.randrange(1 << 32)}"


@pytest.fixture
def start(tb, queue):
    """start(handler, **options) runs a Worker on the test's queue; stopped at teardown."""
    workers: list[Worker] = []

    def _start(handler, **options) -> Worker:
        options.setdefault("poll_wait", 1)
        w = Worker(tb, [queue], handler, worker_id="test-python", **options)
        w.start()
        workers.append(w)
        return w

    yield _start
    for w in workers:
        w.stop()


def submit(tb: Client, queue: str, *specs: broker_pb2.TaskSpec) -> list[str]:
    for s in specs:
        s.queue = queue
    return [r.task_id for r in tb.broker.Submit(broker_pb2.SubmitRequest(tasks=specs), timeout=10).results]


def wait_state(tb: Client, task_id: str, want: int, timeout: float = 15) -> admin_pb2.Task:
    deadline = time.monotonic() + timeout
    while True:
        task = tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=10).task
        if task.state == want:
            return task
        assert time.monotonic() < deadline, f"task is {State.Name(task.state)}, want {State.Name(want)}"
        time.sleep(0.05)


def test_worker_completes_tasks_within_its_concurrency(tb, queue, start):
    ids = submit(tb, queue, *[broker_pb2.TaskSpec(payload=str(i).encode()) for i in range(6)])
    lock = threading.Lock()
    running = peak = 0

    def handler(ctx: TaskContext) -> bytes:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.1)
        with lock:
            running -= 1
        return b"done:" + ctx.payload

    start(handler, concurrency=2)
    for i, task_id in enumerate(ids):
        assert wait_state(tb, task_id, State.TASK_STATE_SUCCEEDED).result == f"done:{i}".encode()
    assert peak <= 2


def test_worker_retries_plain_errors_and_buries_permanent_ones(tb, queue, start):
    retry = broker_pb2.RetryPolicy(max_attempts=3, initial_backoff=duration(0))
    flaky, broken = submit(
        tb,
        queue,
        broker_pb2.TaskSpec(payload=b"flaky", retry=retry),
        broker_pb2.TaskSpec(payload=b"broken", retry=retry),
    )

    def handler(ctx: TaskContext) -> bytes:
        if ctx.payload == b"broken":
            raise PermanentError("cannot parse 'broken'")
        if ctx.attempt == 1:
            raise ValueError("transient")
        return str(ctx.attempt).encode()

    start(handler, concurrency=2)
    assert wait_state(tb, flaky, State.TASK_STATE_SUCCEEDED).result == b"2"
    dead = wait_state(tb, broken, State.TASK_STATE_DEAD)
    assert (dead.attempt, dead.last_error) == (1, "cannot parse 'broken'")


def test_checkpoint_is_visible_to_the_handler_and_the_next_attempt(tb, queue, start):
    (task_id,) = submit(
        tb, queue, broker_pb2.TaskSpec(retry=broker_pb2.RetryPolicy(max_attempts=2, initial_backoff=duration(0)))
    )
    seen = []

    def handler(ctx: TaskContext) -> None:
        before = ctx.last_checkpoint
        ctx.checkpoint(f"after-{ctx.attempt}".encode())
        seen.append((before, ctx.last_checkpoint))
        if ctx.attempt == 1:
            raise RuntimeError("try again")

    start(handler)
    wait_state(tb, task_id, State.TASK_STATE_SUCCEEDED)
    assert seen == [(None, b"after-1"), (b"after-1", b"after-2")]


def test_cancel_requested_reaches_the_handler_through_heartbeats(tb, queue, start):
    (task_id,) = submit(tb, queue, broker_pb2.TaskSpec())
    started = threading.Event()
    reasons = []

    def handler(ctx: TaskContext) -> None:
        started.set()
        assert ctx.cancelled.wait(10), "never cancelled"
        reasons.append(ctx.cancel_reason)
        raise RuntimeError("stopped on request")

    start(handler, lease_duration=3)  # a heartbeat every second
    assert started.wait(10)
    tb.admin.CancelTask(admin_pb2.CancelTaskRequest(task_id=task_id), timeout=10)
    wait_state(tb, task_id, State.TASK_STATE_CANCELLED)
    assert reasons == ["cancel_requested"]


def test_stop_lets_running_handlers_finish(tb, queue, start):
    (task_id,) = submit(tb, queue, broker_pb2.TaskSpec())
    started = threading.Event()

    def handler(ctx: TaskContext) -> bytes:
        started.set()
        time.sleep(0.5)
        return b"finished"

    w = start(handler)
    assert started.wait(10)
    w.stop()
    task = tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=10).task
    assert task.state == State.TASK_STATE_SUCCEEDED


def test_a_worker_with_labels_runs_the_tasks_targeted_at_them(tb, queue, start):
    # Routing: labels go with every Lease; a task for other labels waits.
    target = broker_pb2.Target(labels={"gpu": "a100"})
    other = broker_pb2.Target(labels={"gpu": "h100"})
    mine, theirs = submit(
        tb, queue, broker_pb2.TaskSpec(payload=b"mine", target=target), broker_pb2.TaskSpec(target=other)
    )
    start(lambda ctx: ctx.payload, labels={"gpu": "a100", "region": "eu"})
    assert wait_state(tb, mine, State.TASK_STATE_SUCCEEDED).result == b"mine"
    assert tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=theirs), timeout=10).task.state == State.TASK_STATE_READY


def _states(tb: Client, ids: list[str]) -> dict[str, int]:
    return {i: tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=i), timeout=10).task.state for i in ids}


def test_lease_next_runs_each_task_once_leasing_through_the_settles(tb, queue, start):
    # lease_next: with concurrency 1 only the first task needs a Lease; every Complete or Fail
    # brings the next one (a permanent failure too), and each runs exactly once.
    ids = submit(tb, queue, *[broker_pb2.TaskSpec(payload=str(i).encode()) for i in range(8)])
    seen: list[bytes] = []

    def handler(ctx: TaskContext) -> bytes:
        seen.append(ctx.payload)
        if ctx.payload == b"3":
            raise PermanentError("bad input")
        return b"done:" + ctx.payload

    w = start(handler, concurrency=1)
    for task_id in ids:
        wait_state(tb, task_id, State.TASK_STATE_DEAD if task_id == ids[3] else State.TASK_STATE_SUCCEEDED)
    w.stop()
    assert sorted(seen) == sorted(str(i).encode() for i in range(8))
    assert w.lease_next_tasks == len(ids) - 1


def test_lease_next_false_leases_every_task_with_lease(tb, queue, start):
    ids = submit(tb, queue, *[broker_pb2.TaskSpec() for _ in range(4)])
    w = start(lambda ctx: b"ok", concurrency=1, lease_next=False)
    for task_id in ids:
        wait_state(tb, task_id, State.TASK_STATE_SUCCEEDED)
    w.stop()
    assert w.lease_next_tasks == 0


def test_stopping_mid_stream_leaves_the_rest_ready(tb, queue, start):
    ids = submit(tb, queue, *[broker_pb2.TaskSpec() for _ in range(10)])
    ran: list[str] = []
    third, release = threading.Event(), threading.Event()

    def handler(ctx: TaskContext) -> bytes:
        ran.append(ctx.task_id)
        if len(ran) == 3:
            third.set()
            assert release.wait(10)
        return b"ok"

    w = start(handler, concurrency=1)
    assert third.wait(15)
    w.stop(wait=False)  # while the third task runs: its Complete must not lease another
    release.set()
    w.stop()
    states = _states(tb, ids)
    assert len(ran) == len(set(ran)) == 3
    assert all(states[i] == State.TASK_STATE_SUCCEEDED for i in ran)
    assert all(states[i] == State.TASK_STATE_READY for i in ids if i not in ran)


def test_deadlines_are_watched_without_a_thread_per_task(tb, queue, start):
    # One clock thread watches every task's deadline and lease; a threading.Timer per task
    # cost a thread start on every leased task with a deadline.
    deadline = broker_pb2.TaskSpec()
    deadline.deadline.FromSeconds(int(time.time()) + 3600)
    ids = submit(tb, queue, *[broker_pb2.TaskSpec(deadline=deadline.deadline) for _ in range(4)])
    timers: list[int] = []

    def handler(ctx: TaskContext) -> bytes:
        timers.append(sum(isinstance(t, threading.Timer) for t in threading.enumerate()))
        return b"ok"

    start(handler, concurrency=4)
    for task_id in ids:
        wait_state(tb, task_id, State.TASK_STATE_SUCCEEDED)
    assert timers == [0, 0, 0, 0]


def test_a_result_of_the_wrong_type_fails_the_attempt_naming_the_type(tb, queue, start):
    spec = broker_pb2.TaskSpec(retry=broker_pb2.RetryPolicy(max_attempts=1))
    (task_id,) = submit(tb, queue, spec)
    start(lambda ctx: {"not": "bytes"})
    task = wait_state(tb, task_id, State.TASK_STATE_DEAD)
    assert "handler returned dict" in task.last_error


def test_a_str_result_is_stored_as_utf8(tb, queue, start):
    (task_id,) = submit(tb, queue, broker_pb2.TaskSpec())
    start(lambda ctx: "héllo")
    task = wait_state(tb, task_id, State.TASK_STATE_SUCCEEDED)
    assert task.result == "héllo".encode()


def test_handler_failures_are_logged_by_kind(tb, queue, start, caplog):
    """A RetryableError is a planned retry and a PermanentError (or the last attempt) a
    permanent failure: one WARN line each, no stack; any other exception is unexpected: ERROR
    with its stack."""
    retry = broker_pb2.RetryPolicy(max_attempts=2, initial_backoff=duration(0))
    planned, broken, crashing = submit(
        tb,
        queue,
        broker_pb2.TaskSpec(payload=b"planned", retry=retry),
        broker_pb2.TaskSpec(payload=b"broken", retry=retry),
        broker_pb2.TaskSpec(payload=b"crashing", retry=broker_pb2.RetryPolicy(max_attempts=1)),
    )

    def handler(ctx: TaskContext) -> bytes:
        if ctx.payload == b"broken":
            raise PermanentError("no such order")
        if ctx.payload == b"crashing":
            raise KeyError("surprise")
        raise RetryableError("backend busy")

    caplog.set_level(logging.DEBUG, logger="taskbroker")
    start(handler, concurrency=3)
    for task_id in (planned, broken, crashing):
        wait_state(tb, task_id, State.TASK_STATE_DEAD)

    def lines(task_id: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if task_id in r.getMessage() and r.levelno >= logging.WARNING]

    got = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in lines(planned)]
    assert got == [
        ("WARNING", f"task {planned}: attempt 1 of 2 failed, the task will be retried: backend busy", False),
        ("WARNING", f"task {planned}: attempt 2 of 2 failed, the task goes DEAD: backend busy", False),
    ]
    got = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in lines(broken)]
    assert got == [("WARNING", f"task {broken}: failed permanently, the task goes DEAD: no such order", False)]
    got = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in lines(crashing)]
    assert got == [("ERROR", f"task {crashing}: handler raised KeyError: 'surprise'", True)]
