"""Flow in the Python client: ``wait`` follows WatchTasks (against an in-process
fake AdminService that drops a stream, so the reconnect with after_event_id is seen), and
dependencies plus ``submit_and_wait`` against a live broker at $TASKBROKER_ADDR (skipped
without one)."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from taskbroker import AsyncClient, Client, TaskbrokerError, TaskContext, TaskFailedError, WaitTimeout, Worker, task_spec
from taskbroker.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, event_pb2

ADDR = os.environ.get("TASKBROKER_ADDR")
live = pytest.mark.skipif(not ADDR, reason="TASKBROKER_ADDR is not set; needs a live broker")

S = broker_pb2


class FakeAdmin(admin_pb2_grpc.AdminServiceServicer):  # type: ignore[misc]
    """Tasks by id; each WatchTasks call runs the next script in ``watches`` (a function of
    the request and the context that yields responses), recording the requests."""

    def __init__(self, states: dict[str, int]) -> None:
        self.lock = threading.Lock()
        self.states = dict(states)
        self.watch_requests: list[event_pb2.WatchTasksRequest] = []
        self.watches: list = []  # type: ignore[type-arg]

    def set(self, task_id: str, state: int) -> None:
        with self.lock:
            self.states[task_id] = state

    def GetTask(self, request, context):  # type: ignore[no-untyped-def]
        with self.lock:
            state = self.states.get(request.task_id)
        if state is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "task_id: no such task")
        if state in (S.TASK_STATE_DEAD, S.TASK_STATE_CANCELLED):
            task = admin_pb2.Task(id=request.task_id, state=state, last_error=f"boom-{request.task_id}")
        else:
            task = admin_pb2.Task(id=request.task_id, state=state, result=b"r-" + request.task_id.encode())
        return admin_pb2.GetTaskResponse(task=task)

    def WatchTasks(self, request, context):  # type: ignore[no-untyped-def]
        with self.lock:
            self.watch_requests.append(request)
            script = self.watches.pop(0) if self.watches else hold
        context.send_initial_metadata(())
        yield from script(self, request, context)


def hold(fake: FakeAdmin, request: event_pb2.WatchTasksRequest, context: grpc.ServicerContext) -> Iterator[event_pb2.WatchTasksResponse]:
    """Sends nothing until the client goes away."""
    gone = threading.Event()
    context.add_callback(gone.set)
    gone.wait()
    return
    yield


def event(event_id: int, task_id: str) -> event_pb2.WatchTasksResponse:
    return event_pb2.WatchTasksResponse(
        events=[
            event_pb2.TaskEvent(
                event_id=event_id, task_id=task_id, kind=event_pb2.TASK_EVENT_KIND_SUCCEEDED, state=S.TASK_STATE_SUCCEEDED
            )
        ]
    )


@pytest.fixture
def fake() -> Iterator[tuple[FakeAdmin, str]]:
    admin = FakeAdmin({"t1": S.TASK_STATE_LEASED, "t2": S.TASK_STATE_READY, "done": S.TASK_STATE_SUCCEEDED})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield admin, f"127.0.0.1:{port}"
    server.stop(None)


def test_a_finished_task_returns_at_once(fake: tuple[FakeAdmin, str]) -> None:
    admin, addr = fake
    with Client(addr) as tb:
        task = tb.wait("done", timeout=30)
    assert task.state == S.TASK_STATE_SUCCEEDED and task.result == b"r-done"
    # The watch was opened first (so nothing between the read and the watch is missed).
    assert [list(r.task_ids) for r in admin.watch_requests] == [["done"]]


def test_wait_resumes_after_the_last_event_when_the_stream_drops(fake: tuple[FakeAdmin, str]) -> None:
    admin, addr = fake

    def first(fake: FakeAdmin, req: event_pb2.WatchTasksRequest, ctx: grpc.ServicerContext) -> Iterator[event_pb2.WatchTasksResponse]:
        fake.set("t1", S.TASK_STATE_SUCCEEDED)
        yield event(7, "t1")
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "the broker is restarting")

    def second(fake: FakeAdmin, req: event_pb2.WatchTasksRequest, ctx: grpc.ServicerContext) -> Iterator[event_pb2.WatchTasksResponse]:
        fake.set("t2", S.TASK_STATE_SUCCEEDED)
        yield event(9, "t2")

    admin.watches = [first, second]
    with Client(addr) as tb:
        tasks = tb.wait_all(["t1", "t2"], timeout=30)
    assert [t.id for t in tasks] == ["t1", "t2"]
    assert all(t.state == S.TASK_STATE_SUCCEEDED for t in tasks)
    first_req, second_req = admin.watch_requests
    assert list(first_req.task_ids) == ["t1", "t2"] and first_req.after_event_id == 0
    assert event_pb2.TASK_EVENT_KIND_SUCCEEDED in first_req.kinds
    # Resumed after event 7, for the task still running.
    assert list(second_req.task_ids) == ["t2"] and second_req.after_event_id == 7


def test_wait_gives_up_at_the_timeout(fake: tuple[FakeAdmin, str]) -> None:
    _, addr = fake
    with Client(addr) as tb, pytest.raises(WaitTimeout) as err:
        tb.wait("t1", timeout=0.3)
    assert err.value.task_ids == ["t1"] and isinstance(err.value, TimeoutError)


def test_wait_raises_what_is_not_a_dropped_stream(fake: tuple[FakeAdmin, str]) -> None:
    _, addr = fake
    with Client(addr) as tb, pytest.raises(grpc.RpcError) as err:
        tb.wait("nope", timeout=5)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_async_wait_resumes_too(fake: tuple[FakeAdmin, str]) -> None:
    admin, addr = fake

    def drop(fake: FakeAdmin, req: event_pb2.WatchTasksRequest, ctx: grpc.ServicerContext) -> Iterator[event_pb2.WatchTasksResponse]:
        yield event_pb2.WatchTasksResponse(events=[event_pb2.TaskEvent(event_id=3, task_id="t2")])
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "gone")

    def finish(fake: FakeAdmin, req: event_pb2.WatchTasksRequest, ctx: grpc.ServicerContext) -> Iterator[event_pb2.WatchTasksResponse]:
        fake.set("t1", S.TASK_STATE_DEAD)
        yield event(5, "t1")

    admin.watches = [drop, finish]

    async def go() -> admin_pb2.Task:
        async with AsyncClient(addr) as tb:
            return await tb.wait("t1", timeout=30)

    with pytest.raises(TaskFailedError) as err:
        asyncio.run(go())
    assert (err.value.task_id, err.value.state, err.value.last_error) == ("t1", S.TASK_STATE_DEAD, "boom-t1")
    assert [r.after_event_id for r in admin.watch_requests] == [0, 3]


@pytest.mark.parametrize(("state", "name"), [(S.TASK_STATE_DEAD, "DEAD"), (S.TASK_STATE_CANCELLED, "CANCELLED")])
def test_waiting_for_a_task_that_failed_raises_task_failed_error(fake: tuple[FakeAdmin, str], state: int, name: str) -> None:
    admin, addr = fake
    admin.set("f", state)
    with Client(addr) as tb:
        with pytest.raises(TaskFailedError) as waited:
            tb.wait("f", timeout=30)
        # The typed reader of the same task says the same, and a task read by GetTask too.
        with pytest.raises(TaskFailedError) as read:
            tb.get_result(waited.value.task, dict)
        with pytest.raises(TaskFailedError):
            tb.get_result("f", dict)
    for e in (waited.value, read.value):
        assert (e.task_id, e.state, e.state_name, e.last_error) == ("f", state, name, "boom-f")
        assert str(e) == f"task f ended {name}: boom-f"
        assert isinstance(e, TaskbrokerError)
    # wait_all returns the tasks whatever their state.
    with Client(addr) as tb:
        (task,) = tb.wait_all(["f"], timeout=30)
    assert task.state == state


def test_task_spec_carries_the_dependency_fields() -> None:
    s = task_spec("q", b"x", depends_on=["a"], depends_on_index=[0, 1], run_if_dependency_fails=True)
    assert list(s.depends_on) == ["a"] and list(s.depends_on_index) == [0, 1] and s.run_if_dependency_fails


@live
def test_a_dependent_runs_after_its_dependency_and_submit_and_wait_gets_the_result() -> None:
    queue = f"test.python.flow.{random.randrange(1 << 32)}"
    order: list[bytes] = []

    def handler(ctx: TaskContext) -> bytes:
        order.append(ctx.payload)
        return ctx.payload.upper()

    with Client.from_env(ADDR) as tb:
        first, second = tb.submit_many([task_spec(queue, b"a"), task_spec(queue, b"b", depends_on_index=[0])])
        blocked = tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=second.task_id)).task
        assert blocked.state == S.TASK_STATE_BLOCKED and list(blocked.depends_on) == [first.task_id]
        worker = Worker(tb, [queue], handler, worker_id="test-python-flow", poll_wait=1)
        t = threading.Thread(target=worker.run, kwargs={"handle_signals": False})
        t.start()
        try:
            done = tb.wait_all([first.task_id, second.task_id], timeout=30)
            assert [d.result for d in done] == [b"A", b"B"] and order == [b"a", b"b"]
            task = tb.submit_and_wait(queue, b"c", timeout=30, depends_on=[second.task_id])
            assert task.state == S.TASK_STATE_SUCCEEDED and task.result == b"C"
        finally:
            worker.stop()
            t.join(30)
