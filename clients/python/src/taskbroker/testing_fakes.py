"""The fake clients of ``taskbroker.testing``: ``FakeClient`` and ``AsyncFakeClient``, which run a
submitted task's handler in-process at once, attempt after attempt as the broker would.
``taskbroker.testing`` re-exports them."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from taskbroker import handlers, spec
from taskbroker.aio import AsyncTaskContext
from taskbroker.client import decode_result, task_spec
from taskbroker.context import TaskContext
from taskbroker.errors import raise_if_failed
from taskbroker.serde import DEFAULT_SERIALIZER, Serializer, encode_payload
from taskbroker.tasks import TaskInfo
from taskbroker.testing_context import (
    DEFAULT_MAX_ATTEMPTS,
    AsyncTestContext,
    Outcome,
    TestContext,
    _new_id,
    _now,
    leased_task,
)
from taskbroker.v1 import admin_pb2, broker_pb2, event_pb2
from taskbroker.wait import WaitTimeout

T = TypeVar("T")
State = broker_pb2.TaskState


@dataclasses.dataclass
class _Stored:
    task: admin_pb2.Task
    outcomes: list[Outcome]


class _FakeBase:
    """The store and the submit rules both fakes share."""

    def __init__(self, serializer: Serializer | None = None) -> None:
        self.serializer: Serializer = serializer or DEFAULT_SERIALIZER
        self._tasks: dict[str, _Stored] = {}
        self._handlers: dict[str, handlers.Registered] = {}

    @property
    def tasks(self) -> list[admin_pb2.Task]:
        """Every task submitted, in order, as ``get_task`` returns it."""
        return [s.task for s in self._tasks.values()]

    def outcomes(self, task_id: str) -> list[Outcome]:
        """Each attempt's outcome, in order."""
        return list(self._stored(task_id).outcomes)

    def _stored(self, task_id: str) -> _Stored:
        if task_id not in self._tasks:
            raise KeyError(f"no task {task_id}")
        return self._tasks[task_id]

    def _copy(self, task_id: str) -> admin_pb2.Task:
        task = admin_pb2.Task()
        task.CopyFrom(self._stored(task_id).task)
        return task

    def _result(self, task: str | admin_pb2.Task | TaskInfo, type_: type[T]) -> T:
        return decode_result(self.serializer, self._copy(task) if isinstance(task, str) else task, type_)

    def _finished(self, task_id: str) -> admin_pb2.Task:
        task = self._copy(task_id)
        if task.state not in (State.TASK_STATE_SUCCEEDED, State.TASK_STATE_DEAD, State.TASK_STATE_CANCELLED):
            raise WaitTimeout([task_id], 0.0)
        return task

    def _admit(self, s: broker_pb2.TaskSpec, earlier: list[str]) -> tuple[broker_pb2.SubmitResult, _Stored | None]:
        """Stores the task (or finds the one with its key); the stored task to run, if new."""
        if not s.queue:
            raise ValueError("a task's queue is empty")
        if s.key:
            for stored in self._tasks.values():
                t = stored.task
                if t.queue == s.queue and t.key == s.key:
                    return broker_pb2.SubmitResult(task_id=t.id, deduplicated=True), None
        max_attempts = 1 if s.at_most_once else (s.retry.max_attempts or DEFAULT_MAX_ATTEMPTS)
        task = admin_pb2.Task(
            id=_new_id(),
            queue=s.queue,
            payload=s.payload,
            key=s.key,
            priority=s.priority,
            metadata=dict(s.metadata),
            state=State.TASK_STATE_READY,
            max_attempts=max_attempts,
            concurrency_key=s.concurrency_key,
            bucket=s.bucket,
            depends_on=list(s.depends_on) + [earlier[i] for i in s.depends_on_index],
            run_if_dependency_fails=s.run_if_dependency_fails,
            at_most_once=s.at_most_once,
        )
        task.created_at.FromDatetime(_now())
        stored = _Stored(task, [])
        self._tasks[task.id] = stored
        return broker_pb2.SubmitResult(task_id=task.id), stored

    def _dependencies(self, task: admin_pb2.Task) -> dict[str, bytes] | None:
        """The dependencies' results; None when one did not succeed and the task is cancelled."""
        results: dict[str, bytes] = {}
        for dep in task.depends_on:
            d = self._tasks.get(dep)
            if d is not None and d.task.state == State.TASK_STATE_SUCCEEDED:
                results[dep] = d.task.result
            elif not task.run_if_dependency_fails:
                return None
        return results

    def _lease(self, stored: _Stored) -> tuple[handlers.Registered, broker_pb2.LeasedTask] | None:
        """The next attempt's handler and task, or None when the task cannot run (yet)."""
        task = stored.task
        reg = self._handlers.get(task.queue)
        if reg is None or task.state != State.TASK_STATE_READY or task.attempt >= task.max_attempts:
            return None
        deps = self._dependencies(task)
        if deps is None:
            task.state = State.TASK_STATE_CANCELLED
            task.cancel_reason = event_pb2.CANCEL_REASON_DEPENDENCY_FAILED
            task.finished_at.FromDatetime(_now())
            return None
        task.attempt += 1
        leased = leased_task(
            task.queue, task.payload, task_id=task.id, key=task.key, attempt=task.attempt,
            max_attempts=task.max_attempts, metadata=task.metadata,
            checkpoint=task.checkpoint if task.has_checkpoint else None,
            dependency_results=deps, at_most_once=task.at_most_once, fencing_token=task.attempt,
        )
        return reg, leased

    def _settle(self, stored: _Stored, ctx: TestContext | AsyncTestContext, out: Outcome) -> bool:
        """Records one attempt's outcome; True when the task is finished."""
        task = stored.task
        stored.outcomes.append(out)
        if ctx.last_checkpoint is not None:
            task.checkpoint = ctx.last_checkpoint
            task.has_checkpoint = True
        if out.succeeded:
            task.state = State.TASK_STATE_SUCCEEDED
            task.result = out.result or b""
        else:
            task.last_error = out.error_message
            if out.retryable and task.attempt < task.max_attempts:
                return False
            task.state = State.TASK_STATE_DEAD
        task.finished_at.FromDatetime(_now())
        task.updated_at.FromDatetime(_now())
        return True

    def _specs(self, queue: str, payload: Any, options: Mapping[str, Any]) -> broker_pb2.TaskSpec:
        return task_spec(queue, encode_payload(self.serializer, payload), **options)


class FakeClient(_FakeBase):
    """A ``Client`` and a ``Worker`` in one object, with no broker: ``submit`` runs the
    registered handler of the task's queue at once, in this thread, retrying as the broker
    would. A task of a queue without a handler stays READY (``wait`` raises ``WaitTimeout``);
    ``run_pending()`` runs such tasks once their handler is registered.

    ``FakeClient(worker=w)`` takes the handlers and middleware already registered on a
    ``Worker`` (which is not started)."""

    def __init__(self, *, serializer: Serializer | None = None, worker: Any = None) -> None:
        super().__init__(serializer or (worker.serializer if worker is not None else None))
        self._middleware: list[handlers.Middleware] = []
        if worker is not None:
            self._handlers.update(worker._handlers)
            self._middleware.extend(worker._middleware)

    def handler(self, queue: str) -> Callable[[Any], Any]:
        """``@fake.handler("emails")``, as ``Worker.handler``."""

        def register(fn: Any) -> Any:
            self.handle(queue, fn)
            return fn

        return register

    def handle(self, queue: str, fn: Callable[..., Any]) -> None:
        if queue in self._handlers:
            raise ValueError(f"queue {queue} already has a handler")
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"handler for queue {queue} is async def: use AsyncFakeClient")
        self._handlers[queue] = handlers.register(queue, fn, TaskContext)

    def use(self, middleware: handlers.Middleware) -> handlers.Middleware:
        self._middleware.append(middleware)
        return middleware

    def submit(self, queue: str, payload: Any = b"", *, timeout: spec.Duration = spec.CALL_TIMEOUT, **options: Any) -> broker_pb2.SubmitResult:
        """As ``Client.submit`` (the same keyword arguments); the task has run when it returns."""
        return self.submit_many([self._specs(queue, payload, options)])[0]

    def submit_many(self, specs: Sequence[broker_pb2.TaskSpec], *, timeout: spec.Duration = spec.CALL_TIMEOUT) -> list[broker_pb2.SubmitResult]:
        results: list[broker_pb2.SubmitResult] = []
        new: list[_Stored] = []
        for s in specs:
            r, stored = self._admit(s, [x.task_id for x in results])
            results.append(r)
            if stored is not None:
                new.append(stored)
        for stored in new:
            self._run(stored)
        return results

    def run_pending(self) -> int:
        """Runs every READY task whose queue has a handler now; how many ran."""
        ready = [s for s in self._tasks.values() if s.task.state == State.TASK_STATE_READY and s.task.queue in self._handlers]
        for s in ready:
            self._run(s)
        return len(ready)

    def _run(self, stored: _Stored) -> None:
        while (lease := self._lease(stored)) is not None:
            reg, leased = lease
            ctx = TestContext(task=leased, serializer=self.serializer)
            out = ctx.run(reg.fn, middleware=self._middleware, raw=not reg.typed)
            if self._settle(stored, ctx, out):
                return

    def wait(self, task_id: str, *, timeout: spec.Duration | None = None) -> TaskInfo:
        """As ``Client.wait``: the SUCCEEDED task, ``TaskFailedError`` for DEAD or CANCELLED,
        ``WaitTimeout`` for a task that has not run."""
        return raise_if_failed(TaskInfo.of(self._finished(task_id)))  # type: ignore[no-any-return]

    def wait_all(self, task_ids: Iterable[str], *, timeout: spec.Duration | None = None) -> list[TaskInfo]:
        return [TaskInfo.of(self._finished(t)) for t in task_ids]

    def submit_and_wait(self, queue: str, payload: Any = b"", *, timeout: spec.Duration | None = None, **submit: Any) -> TaskInfo:
        return self.wait(self.submit(queue, payload, **submit).task_id, timeout=timeout)

    def get_task(self, task_id: str, *, timeout: spec.Duration = spec.CALL_TIMEOUT) -> TaskInfo:
        """The task as the fake holds it (``.state``, ``.result``, ``.attempt``, ``.last_error``)."""
        return TaskInfo.of(self._copy(task_id))

    def get_result(self, task: str | admin_pb2.Task | TaskInfo, type_: type[T], *, timeout: spec.Duration = spec.CALL_TIMEOUT) -> T:
        """As ``Client.get_result``."""
        return self._result(task, type_)

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeClient:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class AsyncFakeClient(_FakeBase):
    """``FakeClient`` for ``async def`` handlers and the ``AsyncClient`` calls (awaited)."""

    def __init__(self, *, serializer: Serializer | None = None, worker: Any = None) -> None:
        super().__init__(serializer or (worker.serializer if worker is not None else None))
        self._middleware: list[handlers.AsyncMiddleware] = []
        if worker is not None:
            self._handlers.update(worker._handlers)
            self._middleware.extend(worker._middleware)

    def handler(self, queue: str) -> Callable[[Any], Any]:
        def register(fn: Any) -> Any:
            self.handle(queue, fn)
            return fn

        return register

    def handle(self, queue: str, fn: Callable[..., Any]) -> None:
        if queue in self._handlers:
            raise ValueError(f"queue {queue} already has a handler")
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"handler for queue {queue} is not async def: use FakeClient")
        self._handlers[queue] = handlers.register(queue, fn, AsyncTaskContext)

    def use(self, middleware: handlers.AsyncMiddleware) -> handlers.AsyncMiddleware:
        self._middleware.append(middleware)
        return middleware

    async def submit(self, queue: str, payload: Any = b"", *, timeout: spec.Duration = spec.CALL_TIMEOUT, **options: Any) -> broker_pb2.SubmitResult:
        return (await self.submit_many([self._specs(queue, payload, options)]))[0]

    async def submit_many(self, specs: Sequence[broker_pb2.TaskSpec], *, timeout: spec.Duration = spec.CALL_TIMEOUT) -> list[broker_pb2.SubmitResult]:
        results: list[broker_pb2.SubmitResult] = []
        new: list[_Stored] = []
        for s in specs:
            r, stored = self._admit(s, [x.task_id for x in results])
            results.append(r)
            if stored is not None:
                new.append(stored)
        for stored in new:
            await self._run(stored)
        return results

    async def run_pending(self) -> int:
        ready = [s for s in self._tasks.values() if s.task.state == State.TASK_STATE_READY and s.task.queue in self._handlers]
        for s in ready:
            await self._run(s)
        return len(ready)

    async def _run(self, stored: _Stored) -> None:
        while (lease := self._lease(stored)) is not None:
            reg, leased = lease
            ctx = AsyncTestContext(task=leased, serializer=self.serializer)
            out = await ctx.run(reg.fn, middleware=self._middleware, raw=not reg.typed)
            if self._settle(stored, ctx, out):
                return

    async def get_task(self, task_id: str, *, timeout: spec.Duration = spec.CALL_TIMEOUT) -> TaskInfo:
        return TaskInfo.of(self._copy(task_id))

    async def get_result(self, task: str | admin_pb2.Task | TaskInfo, type_: type[T], *, timeout: spec.Duration = spec.CALL_TIMEOUT) -> T:
        return self._result(task, type_)

    async def wait(self, task_id: str, *, timeout: spec.Duration | None = None) -> TaskInfo:
        return raise_if_failed(TaskInfo.of(self._finished(task_id)))  # type: ignore[no-any-return]

    async def wait_all(self, task_ids: Iterable[str], *, timeout: spec.Duration | None = None) -> list[TaskInfo]:
        return [TaskInfo.of(self._finished(t)) for t in task_ids]

    async def submit_and_wait(self, queue: str, payload: Any = b"", *, timeout: spec.Duration | None = None, **submit: Any) -> TaskInfo:
        return await self.wait((await self.submit(queue, payload, **submit)).task_id, timeout=timeout)

    async def close(self) -> None:
        pass
