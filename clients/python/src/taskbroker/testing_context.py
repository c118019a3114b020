"""The test contexts of ``taskbroker.testing``: ``leased_task``, ``Outcome``, ``TestContext`` and
``AsyncTestContext`` (which record what a handler did). ``taskbroker.testing`` re-exports them."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import itertools
import math
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from taskbroker import handlers, spec
from taskbroker.aio import AsyncTaskContext
from taskbroker.aio_context import _fail_request as _async_fail_request
from taskbroker.context import CANCEL_REQUESTED, LEASE_LOST, TaskContext
from taskbroker.errors import LeaseLostError
from taskbroker.serde import DEFAULT_SERIALIZER, Serializer, encode_payload
from taskbroker.v1 import broker_pb2
from taskbroker.worker import _fail_request

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
