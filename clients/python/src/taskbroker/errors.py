"""Errors a handler raises to steer retries, and the broker's rich error details."""

from __future__ import annotations

import datetime
from typing import Any

import grpc
import grpc.aio
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from taskbroker.v1 import broker_pb2

#: The google.rpc.ErrorInfo domain of every reason the broker defines.
ERROR_DOMAIN = "taskbroker.dev"
#: ErrorInfo reason for a lease token that no longer holds the task (status ABORTED).
REASON_LEASE_LOST = "LEASE_LOST"


class TaskbrokerError(Exception):
    """The base of every exception this package raises or interprets (gRPC errors stay
    ``grpc.RpcError``; ``WorkerStoppedError`` carries one as ``__cause__``)."""


class WorkerStoppedError(TaskbrokerError):
    """The worker stopped by itself: the broker refused its Lease with a code retrying cannot
    fix (UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT, UNIMPLEMENTED). ``code`` is it."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message)
        self.code = code


class RetryableError(TaskbrokerError):
    """A failure the broker should retry; ``retry_after`` (a ``timedelta`` or seconds)
    overrides the backoff;
    ``prefer_same_worker`` asks for the retry to be reserved for this worker (its local files
    are here): FailRequest.prefer_same_worker, SOFT unless the task's sticky policy says HARD.

    ``cool_down_key`` (a ``timedelta`` or seconds, e.g. a 429's ``Retry-After``) holds the
    task's concurrency key in its queue for that long, and ``cool_down_bucket`` its limit
    bucket: no task of it is leased before then, on any replica, and this task's retry waits
    at least as long (FailRequest.cooldown; above zero, at most the broker's max_cooldown, one
    hour by default). Pass one of them, not both.

    Any exception other than PermanentError is retried too: raise this one only to set
    ``retry_after``, ``prefer_same_worker`` or a cooldown.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | datetime.timedelta | None = None,
        prefer_same_worker: bool = False,
        cool_down_key: float | datetime.timedelta | None = None,
        cool_down_bucket: float | datetime.timedelta | None = None,
    ) -> None:
        if cool_down_key is not None and cool_down_bucket is not None:
            raise ValueError("pass cool_down_key or cool_down_bucket, not both")
        super().__init__(message)
        self.retry_after = retry_after
        self.prefer_same_worker = prefer_same_worker
        self.cool_down_key = cool_down_key
        self.cool_down_bucket = cool_down_bucket

    def cooldown(self) -> broker_pb2.Cooldown | None:
        """The FailRequest.cooldown this failure asks for, or None."""
        if self.cool_down_key is not None:
            scope, length = broker_pb2.COOLDOWN_SCOPE_CONCURRENCY_KEY, self.cool_down_key
        elif self.cool_down_bucket is not None:
            scope, length = broker_pb2.COOLDOWN_SCOPE_BUCKET, self.cool_down_bucket
        else:
            return None
        if isinstance(length, datetime.timedelta):
            length = length.total_seconds()
        c = broker_pb2.Cooldown(scope=scope)
        c.duration.FromNanoseconds(round(length * 1e9))
        return c


class PermanentError(TaskbrokerError):
    """A failure that retrying cannot fix: the task goes straight to DEAD."""


class TaskNotSucceededError(TaskbrokerError):
    """A task's result was asked for, but the task is not SUCCEEDED: ``task`` is the task as
    read (``.state``, ``.last_error``)."""

    def __init__(self, message: str, task: Any) -> None:
        super().__init__(message)
        self.task = task


class TaskFailedError(TaskNotSucceededError):
    """A waited-for task ended DEAD or CANCELLED (``wait``, ``submit_and_wait``, ``get_result``,
    sync and asyncio): ``task_id``, ``state`` (the ``TaskState`` value, e.g.
    ``TASK_STATE_DEAD``; ``state_name`` is ``"DEAD"``) and ``last_error`` (the message of its
    last failed attempt, or ``""``). ``task`` is the task as read. A subclass of
    ``TaskNotSucceededError``, which stays the error of a task not finished yet."""

    def __init__(self, task: Any) -> None:
        self.task_id: str = task.id
        self.state: int = task.state
        self.state_name: str = broker_pb2.TaskState.Name(task.state).removeprefix("TASK_STATE_")
        self.last_error: str = task.last_error
        why = f": {self.last_error}" if self.last_error else ""
        super().__init__(f"task {self.task_id} ended {self.state_name}{why}", task)


def raise_if_failed(task: Any) -> Any:
    """``task`` itself, unless it ended DEAD or CANCELLED: then ``TaskFailedError``."""
    if task.state in (broker_pb2.TASK_STATE_DEAD, broker_pb2.TASK_STATE_CANCELLED):
        raise TaskFailedError(task)
    return task


class LeaseLostError(TaskbrokerError):
    """The broker no longer holds this task for us; stop working on it."""


def _status(err: BaseException) -> status_pb2.Status | None:
    """The google.rpc.Status of a failed call, sync (grpc.Call) or asyncio (AioRpcError)."""
    if isinstance(err, grpc.aio.AioRpcError):
        trailers: Any = err.trailing_metadata() or ()
        for key, value in trailers:
            if key == "grpc-status-details-bin" and isinstance(value, bytes):
                return status_pb2.Status.FromString(value)
        return None
    if isinstance(err, grpc.Call):
        return rpc_status.from_call(err)
    return None


def _code(err: BaseException) -> grpc.StatusCode | None:
    if isinstance(err, (grpc.Call, grpc.aio.AioRpcError)):
        return err.code()  # type: ignore[no-any-return]
    return None


def error_info(err: BaseException) -> error_details_pb2.ErrorInfo | None:
    """The first google.rpc.ErrorInfo in a gRPC error's status details, or None.

    The details travel in the ``grpc-status-details-bin`` trailer. Works for the sync and the
    asyncio (``grpc.aio.AioRpcError``) errors.
    """
    status = _status(err)
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None


def retry_delay(err: BaseException) -> float | None:
    """The delay of the google.rpc.RetryInfo in a gRPC error's status details, in seconds,
    or None when it has none (the broker sends one with RESOURCE_EXHAUSTED backpressure)."""
    status = _status(err)
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return float(info.retry_delay.ToNanoseconds()) / 1e9
    return None


def is_lease_lost(err: BaseException) -> bool:
    """True for the broker's ABORTED / LEASE_LOST answer to a stale lease token: by the
    ErrorInfo reason, never by the bare code (docs/client-spec.md, point 2)."""
    if _code(err) != grpc.StatusCode.ABORTED:
        return False
    info = error_info(err)
    return info is not None and info.domain == ERROR_DOMAIN and info.reason == REASON_LEASE_LOST
