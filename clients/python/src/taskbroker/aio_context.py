"""The leased task as an ``async def`` handler sees it (``AsyncTaskContext``), and the Fail
the AsyncWorker sends for an attempt that ended with an error. ``taskbroker.aio`` re-exports
them."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import grpc.aio

from taskbroker import spec
from taskbroker.client import duration
from taskbroker.context import CANCEL_REQUESTED, LEASE_LOST, STOPPING, context_dependency_result
from taskbroker.errors import LeaseLostError, PermanentError, RetryableError, is_lease_lost
from taskbroker.serde import DEFAULT_SERIALIZER, Serializer
from taskbroker.spec import Duration, seconds
from taskbroker.v1 import broker_pb2, broker_pb2_grpc

log = logging.getLogger("taskbroker.aio")
T = TypeVar("T")


class AsyncTaskContext:
    """One leased task as an ``async def`` handler sees it. ``cancelled`` (an asyncio.Event) is
    set when the handler should stop, ``cancel_reason`` says why (``"lease_lost"``,
    ``"cancel_requested"``, ``"deadline"``, ``"stopping"``); a deadline or a hard stop also
    cancels the handler's asyncio task."""

    def __init__(
        self,
        task: broker_pb2.LeasedTask,
        broker: broker_pb2_grpc.BrokerServiceAsyncStub,
        lease_duration: float,
        valid_until: float | None = None,
        serializer: Serializer | None = None,
    ):
        self.task = task
        self.serializer: Serializer = serializer or DEFAULT_SERIALIZER
        self.cancelled = asyncio.Event()
        self.cancel_reason: str | None = None
        self.lost = False
        self._broker = broker
        self._lease_duration = lease_duration
        self._last_checkpoint: bytes | None = task.checkpoint if task.has_checkpoint else None
        self._expires_at = task.lease_expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
        self._runner: asyncio.Task[Any] | None = None
        # When the lease runs out by this process's clock (the loop's monotonic time): the
        # send time of the call that granted or last extended it plus the duration asked for.
        loop = asyncio.get_running_loop()
        self._valid_until = loop.time() + lease_duration if valid_until is None else valid_until
        self._expiry: asyncio.TimerHandle | None = None
        self._settling = False  # the handler is done; its Complete or Fail is being sent
        self._left_behind = False  # abandoned at stop (handed back); its result is discarded
        self._gave_up = False  # its settle was given up at the lease's expiry
        self._settle_failed = False  # its settle was refused (not LEASE_LOST): logged

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def queue(self) -> str:
        return self.task.queue

    @property
    def payload(self) -> bytes:
        return self.task.payload

    @property
    def attempt(self) -> int:
        """1-based number of this attempt."""
        return self.task.attempt

    @property
    def fencing_token(self) -> int:
        """Pass to downstream stores so they can reject writes from a stale holder."""
        return self.task.fencing_token

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.task.metadata)

    @property
    def last_checkpoint(self) -> bytes | None:
        """The newest checkpoint: this attempt's, else the one an earlier attempt saved."""
        return self._last_checkpoint

    @property
    def lease_expires_at(self) -> datetime.datetime:
        """When the lease runs out unless extended, as the broker last said."""
        return self._expires_at

    @property
    def deadline(self) -> datetime.datetime | None:
        return self.task.deadline.ToDatetime(tzinfo=datetime.timezone.utc) if self.task.HasField("deadline") else None

    @property
    def dependency_results(self) -> dict[str, bytes]:
        """The result of each SUCCEEDED dependency of this task, by task id."""
        return dict(self.task.dependency_results)

    def dependency_result(self, task_id: str, type_: type[T]) -> T:
        """One dependency's result decoded as ``type_`` by the worker's serializer (``bytes``:
        as it is). KeyError when ``task_id`` is not a dependency with a result;
        ``PayloadError`` when it does not decode."""
        return context_dependency_result(self.task, task_id, type_, self.serializer)

    async def checkpoint(self, data: bytes, *, timeout: Duration = spec.CALL_TIMEOUT) -> None:
        """Stores progress the next attempt receives, and extends the lease (spec point 3)."""
        req = broker_pb2.CheckpointRequest(
            task_id=self.task_id, lease_token=self.task.lease_token, checkpoint=data,
            extend_by=duration(self._lease_duration),
        )
        sent = asyncio.get_running_loop().time()
        try:
            resp = await self._broker.Checkpoint(req, timeout=seconds(timeout))
        except grpc.aio.AioRpcError as err:
            if is_lease_lost(err):
                self._lose("Checkpoint answered LEASE_LOST")
                raise LeaseLostError(f"task {self.task_id}: lease lost") from err
            raise
        self._last_checkpoint = data
        self._expires_at = resp.lease_expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
        self._valid_until = max(self._valid_until, sent + self._lease_duration)
        if resp.cancel_requested:
            self._cancel(CANCEL_REQUESTED)

    def _cancel(self, reason: str, *, hard: bool = False) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.cancelled.set()
        if hard and self._runner is not None:
            self._runner.cancel()

    def _lose(self, why: str) -> None:
        """The lease is lost: cancels the handler (not hard) and logs it once per task (WARN)."""
        if self.lost:
            return
        self.lost = True
        self._cancel(LEASE_LOST)
        log.warning("task %s: lease lost (%s); handler cancelled, nothing more is reported", self.task_id, why)

    def _watch_lease(self) -> None:
        """Loses the lease when it runs out by this process's clock, whether or not the broker
        answers (spec point 11); an extension meanwhile moves the check."""
        if self.lost or self._left_behind:
            return
        loop = asyncio.get_running_loop()
        if loop.time() >= self._valid_until:
            self._lose("it ran out by the worker's clock without an extension")
            return
        self._expiry = loop.call_at(self._valid_until, self._watch_lease)


AsyncHandler = Callable[[AsyncTaskContext], Awaitable["bytes | None"]]


def _fail_request(ctx: AsyncTaskContext, error: BaseException) -> broker_pb2.FailRequest:
    req = broker_pb2.FailRequest(task_id=ctx.task_id, lease_token=ctx.task.lease_token)
    if ctx.cancel_reason == STOPPING and not isinstance(error, PermanentError):
        # Cut off by the stop timeout: handed back, READY at once for another worker.
        req.error_message = spec.HANDBACK_MESSAGE
        req.retry_after.CopyFrom(duration(0))
        return req
    if isinstance(error, PermanentError):
        req.error_message, req.non_retryable = str(error), True
    elif isinstance(error, RetryableError):
        req.error_message = str(error)
        if error.retry_after is not None:
            req.retry_after.CopyFrom(duration(error.retry_after))
        req.prefer_same_worker = error.prefer_same_worker
        cooldown = error.cooldown()
        if cooldown is not None:
            req.cooldown.CopyFrom(cooldown)
    elif isinstance(error, asyncio.CancelledError):
        req.error_message = f"cancelled: {ctx.cancel_reason}"
    else:
        req.error_message = f"{type(error).__name__}: {error}"
    return req
