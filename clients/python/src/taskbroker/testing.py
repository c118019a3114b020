"""Testing handlers and producers without a broker.

- ``TestContext`` (``AsyncTestContext`` for ``async def`` handlers): the ``TaskContext`` a
  handler receives, built from a queue and a payload (and whatever else the test sets:
  ``attempt``, ``metadata``, the ``checkpoint`` an earlier attempt saved), which records what
  the handler did: ``checkpoints``, ``cancel_checks`` and, through ``run``, its ``Outcome``
  (the result, or the failure as the worker would report it: retryable or permanent, with
  ``retry_after`` and the cooldown asked for, ``cool_down_key`` / ``cool_down_bucket``).
- ``FakeClient`` (``AsyncFakeClient``): the producer calls of ``Client`` (``submit``,
  ``submit_many``, ``get_task``, ``get_result``, ``wait``, ``wait_all``, ``submit_and_wait``)
  and the handler registration of ``Worker`` (``@fake.handler(queue)``, ``handle``, ``use``)
  in one object. A submit runs the task's handler in-process at once, attempt after attempt as
  the broker would (no backoff, ``run_at`` and ``delay`` not waited for), until it succeeds,
  fails permanently or its attempts run out (``max_attempts``, 3 by default; 1 with
  ``at_most_once``).

Example::

    def send(email: dict, ctx: TaskContext) -> str:
        ctx.checkpoint(b"rendered")
        return "sent"

    out = TestContext("emails", {"to": "ada@example.com"}).run(send)
    assert out.succeeded and out.value == "sent"

    fake = FakeClient()
    fake.handle("emails", send)
    assert fake.submit_and_wait("emails", {"to": "ada@example.com"}).result == b'"sent"'
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import itertools
import math
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from taskbroker import handlers, spec
from taskbroker.aio import AsyncTaskContext
from taskbroker.aio import _fail_request as _async_fail_request
from taskbroker.client import decode_result, task_spec
from taskbroker.context import CANCEL_REQUESTED, DEADLINE, LEASE_LOST, STOPPING, TaskContext
from taskbroker.errors import LeaseLostError, raise_if_failed
from taskbroker.serde import DEFAULT_SERIALIZER, Serializer, encode_payload
from taskbroker.tasks import TaskInfo
from taskbroker.v1 import admin_pb2, broker_pb2, event_pb2
from taskbroker.wait import WaitTimeout
from taskbroker.worker import _fail_request

__all__ = [
    "CANCEL_REQUESTED",
    "DEADLINE",
    "DEFAULT_MAX_ATTEMPTS",
    "LEASE_LOST",
    "STOPPING",
    "AsyncFakeClient",
    "AsyncTestContext",
    "FakeClient",
    "Outcome",
    "TestContext",
    "leased_task",
]

T = TypeVar("T")
State = broker_pb2.TaskState

#: The attempts a task gets when its retry policy sets none (the broker's default).
DEFAULT_MAX_ATTEMPTS = 3
#: The lease a test context pretends to hold (seconds).
TEST_LEASE = 30.0

_ids = itertools.count(1)


def _new_id() -> str:
    return f"test-task-{next(_ids)}"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def leased_task(
    queue: str = "test",
    payload: Any = b"",
    *,
    task_id: str | None = None,
    key: str = "",
    attempt: int = 1,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    metadata: Mapping[str, str] | None = None,
    checkpoint: bytes | None = None,
    dependency_results: Mapping[str, bytes] | None = None,
    at_most_once: bool = False,
    fencing_token: int = 1,
    deadline: datetime.datetime | None = None,
    serializer: Serializer | None = None,
) -> broker_pb2.LeasedTask:
    """The LeasedTask a worker would get (``payload`` not ``bytes`` is encoded by
    ``serializer``, JSON by default)."""
    task = broker_pb2.LeasedTask(
        task_id=task_id or _new_id(),
        queue=queue,
        payload=encode_payload(serializer or DEFAULT_SERIALIZER, payload),
        key=key,
        attempt=attempt,
        max_attempts=1 if at_most_once else max_attempts,
        metadata=dict(metadata or {}),
        lease_token="test-lease",
        fencing_token=fencing_token,
        dependency_results=dict(dependency_results or {}),
        at_most_once=at_most_once,
    )
    task.lease_expires_at.FromDatetime(_now() + datetime.timedelta(seconds=TEST_LEASE))
    task.created_at.FromDatetime(_now())
    if checkpoint is not None:
        task.checkpoint = checkpoint
        task.has_checkpoint = True
    if deadline is not None:
        task.deadline.FromDatetime(deadline)
    return task


@dataclasses.dataclass
class Outcome:
    """How one attempt ended, as the worker reports it: Complete with ``result``, or Fail."""

    #: The result bytes the worker would store (None when the attempt failed).
    result: bytes | None = None
    #: What the handler returned (before encoding).
    value: Any = None
    #: What the handler raised (or the TypeError of a result that cannot be encoded).
    error: BaseException | None = None
    #: The Fail's ``error_message``, as the task's ``last_error`` would read.
    error_message: str = ""
    #: False for ``PermanentError`` (and a payload that does not decode).
    retryable: bool = False
    #: The backoff the failure asked for (``RetryableError(retry_after=...)``), in seconds.
    retry_after: float | None = None
    prefer_same_worker: bool = False
    #: The cooldown the failure asked for on the task's concurrency key
    #: (``RetryableError(cool_down_key=...)``), in seconds; None when it asked for none.
    cool_down_key: float | None = None
    #: The same on the task's limit bucket (``RetryableError(cool_down_bucket=...)``).
    cool_down_bucket: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.error is None

    @property
    def permanent(self) -> bool:
        """The failure is permanent: the task goes DEAD without a retry."""
        return self.error is not None and not self.retryable


def _outcome(fail: broker_pb2.FailRequest | None, value: Any, result: bytes, error: BaseException | None) -> Outcome:
    if fail is None or error is None:
        return Outcome(result=result, value=value)
    return Outcome(
        error=error,
        error_message=fail.error_message,
        retryable=not fail.non_retryable,
        retry_after=fail.retry_after.ToTimedelta().total_seconds() if fail.HasField("retry_after") else None,
        prefer_same_worker=fail.prefer_same_worker,
        cool_down_key=_cooldown(fail, broker_pb2.COOLDOWN_SCOPE_CONCURRENCY_KEY),
        cool_down_bucket=_cooldown(fail, broker_pb2.COOLDOWN_SCOPE_BUCKET),
    )


def _cooldown(fail: broker_pb2.FailRequest, scope: int) -> float | None:
    """The Fail's cooldown of that scope, in seconds, or None."""
    if not fail.HasField("cooldown") or fail.cooldown.scope != scope:
        return None
    return float(fail.cooldown.duration.ToTimedelta().total_seconds())


class _Recorder:
    """What a test context saw, and the answers its checkpoints get."""

    def __init__(self, cancel_at_checkpoint: int | None, lose_lease_at_checkpoint: int | None) -> None:
        self.checkpoints: list[bytes] = []
        self.cancel_checks = 0
        self.cancel_at = cancel_at_checkpoint
        self.lose_at = lose_lease_at_checkpoint
        self.outcome: Outcome | None = None

    def Checkpoint(self, req: broker_pb2.CheckpointRequest, timeout: float | None = None) -> Any:  # noqa: N802 -- the stub's name
        self.checkpoints.append(req.checkpoint)
        resp = broker_pb2.CheckpointResponse(
            cancel_requested=self.cancel_at is not None and len(self.checkpoints) >= self.cancel_at
        )
        resp.lease_expires_at.FromDatetime(_now() + datetime.timedelta(seconds=TEST_LEASE))
        return resp

    def loses_next(self) -> bool:
        return self.lose_at is not None and len(self.checkpoints) + 1 >= self.lose_at


class _AsyncRecorder(_Recorder):
    async def Checkpoint(self, req: broker_pb2.CheckpointRequest, timeout: float | None = None) -> Any:  # type: ignore[override]  # noqa: N802
        return _Recorder.Checkpoint(self, req, timeout)


class _CountingEvent(threading.Event):
    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self._recorder = recorder

    def is_set(self) -> bool:
        self._recorder.cancel_checks += 1
        return super().is_set()

    def wait(self, timeout: float | None = None) -> bool:
        self._recorder.cancel_checks += 1
        return super().wait(timeout)


class _CountingAsyncEvent(asyncio.Event):
    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self._recorder = recorder

    def is_set(self) -> bool:
        self._recorder.cancel_checks += 1
        return super().is_set()

    async def wait(self) -> bool:  # type: ignore[override]
        self._recorder.cancel_checks += 1
        return await super().wait()


class _Recording:
    """What both test contexts add to the worker's context classes."""

    _rec: _Recorder

    @property
    def checkpoints(self) -> list[bytes]:
        """The checkpoints the handler saved, in order."""
        return list(self._rec.checkpoints)

    @property
    def cancel_checks(self) -> int:
        """How many times the handler looked at ``cancelled`` (``is_set()`` or ``wait()``)."""
        return self._rec.cancel_checks

    @property
    def outcome(self) -> Outcome | None:
        """The outcome of the last ``run``."""
        return self._rec.outcome


class TestContext(_Recording, TaskContext):
    """A ``TaskContext`` no broker leased: ``checkpoint`` records instead of calling one.

    ``cancel_at_checkpoint=n``: the n-th checkpoint's answer says an operator cancelled the
    task (``cancelled`` is set, ``cancel_reason == "cancel_requested"``).
    ``lose_lease_at_checkpoint=n``: the n-th checkpoint raises ``LeaseLostError`` as a lost
    lease does. ``cancel(reason)`` sets ``cancelled`` as the worker would. Heartbeats are the
    worker's, not the handler's: there are none to record.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        queue: str = "test",
        payload: Any = b"",
        *,
        task: broker_pb2.LeasedTask | None = None,
        serializer: Serializer | None = None,
        cancel_at_checkpoint: int | None = None,
        lose_lease_at_checkpoint: int | None = None,
        **fields: Any,
    ) -> None:
        """``fields``: ``task_id``, ``key``, ``attempt``, ``max_attempts``, ``metadata``,
        ``checkpoint``, ``dependency_results``, ``at_most_once``, ``fencing_token``,
        ``deadline`` (see ``leased_task``); or pass a whole ``task``."""
        if task is None:
            task = leased_task(queue, payload, serializer=serializer, **fields)
        self._rec = _Recorder(cancel_at_checkpoint, lose_lease_at_checkpoint)
        super().__init__(task, self._rec, TEST_LEASE, valid_until=math.inf, serializer=serializer)  # type: ignore[arg-type]
        self.cancelled = _CountingEvent(self._rec)

    def checkpoint(self, data: bytes, *, timeout: spec.Duration = spec.CALL_TIMEOUT) -> None:
        if self._rec.loses_next():
            self._lose("Checkpoint answered LEASE_LOST")
            raise LeaseLostError(f"task {self.task_id}: lease lost")
        super().checkpoint(data, timeout=timeout)

    def cancel(self, reason: str = CANCEL_REQUESTED) -> None:
        """Sets ``cancelled`` with ``reason`` (``"cancel_requested"``, ``"lease_lost"``,
        ``"deadline"``, ``"stopping"``)."""
        if reason == LEASE_LOST:
            self._mark_lost()
        else:
            self._cancel(reason)

    def run(
        self,
        handler: Callable[..., Any],
        *,
        middleware: Sequence[handlers.Middleware] = (),
        raw: bool = False,
    ) -> Outcome:
        """Calls ``handler`` as the ``Worker`` would (its parameters filled by their
        annotations, or with ``raw=True`` the context only, as the constructor's handler) and
        returns, and records, how the attempt ended. Exceptions do not propagate."""
        if inspect.iscoroutinefunction(handler):
            raise TypeError("handler is async def: run it with AsyncTestContext")
        reg = handlers.raw(self.queue, handler) if raw else handlers.register(self.queue, handler, TaskContext)
        value: Any = None
        result = b""
        error: BaseException | None = None
        try:
            value = handlers.chain(middleware, self, lambda: reg.fn(*reg.args(self, self.serializer)))
            result = handlers.encode_result(reg, self.serializer, value)
        except Exception as exc:  # noqa: BLE001 -- any handler error fails the attempt, as in the worker
            error = exc
        fail = _fail_request(self, error) if error is not None else None
        self._rec.outcome = _outcome(fail, value, result, error)
        return self._rec.outcome


class AsyncTestContext(_Recording, AsyncTaskContext):
    """``TestContext`` for ``async def`` handlers: an ``AsyncTaskContext``; ``await ctx.run(h)``."""

    __test__ = False

    def __init__(
        self,
        queue: str = "test",
        payload: Any = b"",
        *,
        task: broker_pb2.LeasedTask | None = None,
        serializer: Serializer | None = None,
        cancel_at_checkpoint: int | None = None,
        lose_lease_at_checkpoint: int | None = None,
        **fields: Any,
    ) -> None:
        if task is None:
            task = leased_task(queue, payload, serializer=serializer, **fields)
        self._rec = _AsyncRecorder(cancel_at_checkpoint, lose_lease_at_checkpoint)
        super().__init__(task, self._rec, TEST_LEASE, valid_until=math.inf, serializer=serializer)  # type: ignore[arg-type]
        self.cancelled = _CountingAsyncEvent(self._rec)

    async def checkpoint(self, data: bytes, *, timeout: spec.Duration = spec.CALL_TIMEOUT) -> None:
        if self._rec.loses_next():
            self._lose("Checkpoint answered LEASE_LOST")
            raise LeaseLostError(f"task {self.task_id}: lease lost")
        await super().checkpoint(data, timeout=timeout)

    def cancel(self, reason: str = CANCEL_REQUESTED) -> None:
        """Sets ``cancelled`` with ``reason``, as ``TestContext.cancel``."""
        if reason == LEASE_LOST:
            self._lose("cancelled by the test")
        else:
            self._cancel(reason)

    async def run(
        self,
        handler: Callable[..., Awaitable[Any]],
        *,
        middleware: Sequence[handlers.AsyncMiddleware] = (),
        raw: bool = False,
    ) -> Outcome:
        """Awaits ``handler`` as the ``AsyncWorker`` would; returns and records the outcome."""
        reg = handlers.raw(self.queue, handler) if raw else handlers.register(self.queue, handler, AsyncTaskContext)
        value: Any = None
        result = b""
        error: BaseException | None = None
        try:

            async def call() -> Any:
                return await reg.fn(*reg.args(self, self.serializer))

            value = await handlers.chain_async(middleware, self, call)
            result = handlers.encode_result(reg, self.serializer, value)
        except Exception as exc:  # noqa: BLE001
            error = exc
        fail = _async_fail_request(self, error) if error is not None else None
        self._rec.outcome = _outcome(fail, value, result, error)
        return self._rec.outcome


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

