"""Waiting for tasks to finish (Flow): ``Client.wait`` / ``AsyncClient.wait`` follow the
tasks on ``AdminService.WatchTasks`` instead of polling.

The watch is opened first and its response headers awaited (from then on every matching event
arrives on it), then each task is read once with ``GetTask``: an outcome that came before the
watch opened is seen by the read, one that comes after by the stream, so none is missed and a
finished task returns at once. When the stream drops (a broker restart, a network blip) the
watch is opened again after the last event received (``after_event_id``) and the tasks read
again, with a short growing pause between attempts, until the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence

import grpc

from taskbroker.errors import TaskbrokerError
from taskbroker.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, event_pb2

#: The states a task does not leave by itself.
FINAL_STATES = frozenset({broker_pb2.TASK_STATE_SUCCEEDED, broker_pb2.TASK_STATE_DEAD, broker_pb2.TASK_STATE_CANCELLED})

# Only the events that can end a task are streamed.
_KINDS = [event_pb2.TASK_EVENT_KIND_SUCCEEDED, event_pb2.TASK_EVENT_KIND_DEAD, event_pb2.TASK_EVENT_KIND_CANCELLED]
# A dropped stream or an unreachable broker: open the watch again.
_RECONNECT = frozenset({grpc.StatusCode.UNAVAILABLE})
_FIRST_PAUSE = 0.05
_MAX_PAUSE = 1.0
# The longest single GetTask inside a wait.
_READ_TIMEOUT = 10.0


class WaitTimeout(TaskbrokerError, TimeoutError):
    """The wait ran out of time; the tasks carry on. ``task_ids`` are those not finished yet."""

    def __init__(self, task_ids: Sequence[str], waited: float) -> None:
        super().__init__(f"{len(task_ids)} task(s) not finished after {waited:g} s: {', '.join(task_ids[:5])}")
        self.task_ids = list(task_ids)
        self.waited = waited


def _ids(task_ids: Iterable[str]) -> list[str]:
    ids = list(dict.fromkeys(task_ids))
    if not ids:
        raise ValueError("task_ids is empty")
    if len(ids) > 1000:
        raise ValueError("at most 1000 task_ids per wait (WatchTasks' limit)")
    return ids


class _Deadline:
    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.at = None if timeout is None else time.monotonic() + timeout

    def left(self) -> float | None:
        return None if self.at is None else self.at - time.monotonic()

    def expired(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def call_timeout(self, cap: float | None = None) -> float | None:
        left = self.left()
        if left is None:
            return cap
        return max(0.001, left if cap is None else min(left, cap))


def wait_tasks(
    admin: admin_pb2_grpc.AdminServiceStub, task_ids: Iterable[str], timeout: float | None
) -> list[admin_pb2.Task]:
    """Blocks until every task is SUCCEEDED, DEAD or CANCELLED and returns them in the order
    given; raises ``WaitTimeout`` after ``timeout`` seconds (``None``: no limit)."""
    ids = _ids(task_ids)
    done: dict[str, admin_pb2.Task] = {}
    deadline = _Deadline(timeout)
    after = 0
    pause = _FIRST_PAUSE

    def read(task_id: str) -> None:
        t = admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=deadline.call_timeout(_READ_TIMEOUT)).task
        if t.state in FINAL_STATES:
            done[task_id] = t

    while True:
        pending = [i for i in ids if i not in done]
        if not pending:
            return [done[i] for i in ids]
        if deadline.expired():
            raise WaitTimeout(pending, timeout or 0.0)
        req = event_pb2.WatchTasksRequest(task_ids=pending, kinds=_KINDS, after_event_id=after)
        call = admin.WatchTasks(req, timeout=deadline.call_timeout())
        try:
            # The headers mean the broker accepted the watch: later events will arrive on it.
            call.initial_metadata()
            for task_id in pending:
                read(task_id)
            if all(i in done for i in ids):
                continue
            for resp in call:
                pause = _FIRST_PAUSE
                for ev in resp.events:
                    after = max(after, ev.event_id)
                    if ev.task_id not in done and ev.task_id in ids:
                        read(ev.task_id)
                if all(i in done for i in ids):
                    break
        except grpc.RpcError as e:
            code = e.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline.expired():
                raise WaitTimeout([i for i in ids if i not in done], timeout or 0.0) from None
            if code not in _RECONNECT and code != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        finally:
            call.cancel()
        if all(i in done for i in ids):
            continue
        # The stream ended or dropped: open it again after a pause, so a broker that keeps
        # ending streams is not hammered.
        time.sleep(min(pause, max(0.0, deadline.left() or pause)))
        pause = min(pause * 2, _MAX_PAUSE)


async def wait_tasks_async(
    admin: admin_pb2_grpc.AdminServiceAsyncStub, task_ids: Iterable[str], timeout: float | None
) -> list[admin_pb2.Task]:
    """``wait_tasks`` on asyncio (a ``grpc.aio`` AdminService stub)."""
    ids = _ids(task_ids)
    done: dict[str, admin_pb2.Task] = {}
    deadline = _Deadline(timeout)
    after = 0
    pause = _FIRST_PAUSE

    async def read(task_id: str) -> None:
        resp = await admin.GetTask(
            admin_pb2.GetTaskRequest(task_id=task_id), timeout=deadline.call_timeout(_READ_TIMEOUT)
        )
        if resp.task.state in FINAL_STATES:
            done[task_id] = resp.task

    while True:
        pending = [i for i in ids if i not in done]
        if not pending:
            return [done[i] for i in ids]
        if deadline.expired():
            raise WaitTimeout(pending, timeout or 0.0)
        req = event_pb2.WatchTasksRequest(task_ids=pending, kinds=_KINDS, after_event_id=after)
        call = admin.WatchTasks(req, timeout=deadline.call_timeout())
        try:
            await call.initial_metadata()
            for task_id in pending:
                await read(task_id)
            if all(i in done for i in ids):
                continue
            async for resp in call:
                pause = _FIRST_PAUSE
                for ev in resp.events:
                    after = max(after, ev.event_id)
                    if ev.task_id not in done and ev.task_id in ids:
                        await read(ev.task_id)
                if all(i in done for i in ids):
                    break
        except grpc.RpcError as e:
            code = e.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline.expired():
                raise WaitTimeout([i for i in ids if i not in done], timeout or 0.0) from None
            if code not in _RECONNECT and code != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        finally:
            call.cancel()
        if all(i in done for i in ids):
            continue
        # The stream ended or dropped: open it again after a pause, so a broker that keeps
        # ending streams is not hammered.
        await asyncio.sleep(min(pause, max(0.0, deadline.left() or pause)))
        pause = min(pause * 2, _MAX_PAUSE)
