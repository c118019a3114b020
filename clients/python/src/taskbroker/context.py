"""TaskContext: what a handler gets for one leased task."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from typing import TYPE_CHECKING, TypeVar

from taskbroker import spec
from taskbroker.client import duration
from taskbroker.errors import LeaseLostError, is_lease_lost
from taskbroker.serde import DEFAULT_SERIALIZER, PayloadError, Serializer, one_line, type_name
from taskbroker.v1 import broker_pb2

if TYPE_CHECKING:
    from taskbroker.v1 import broker_pb2_grpc

log = logging.getLogger("taskbroker.worker")

T = TypeVar("T")

#: Why ``TaskContext.cancelled`` was set.
LEASE_LOST = "lease_lost"
CANCEL_REQUESTED = "cancel_requested"
STOPPING = "stopping"
DEADLINE = "deadline"


def context_dependency_result(
    task: broker_pb2.LeasedTask, task_id: str, type_: type[T], serializer: Serializer
) -> T:
    """``dependency_result`` of both task contexts."""
    if task_id not in task.dependency_results:
        raise KeyError(f"task {task.task_id} has no result of a dependency {task_id}")
    data = task.dependency_results[task_id]
    if type_ is bytes:
        return data  # type: ignore[return-value]
    try:
        return serializer.decode(data, type_)  # type: ignore[no-any-return]
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as err:
        raise PayloadError(
            f"the result of dependency {task_id} is not a valid {type_name(type_)}: {one_line(err)}"
        ) from err


class TaskContext:
    """One leased task as a handler sees it.

    ``cancelled`` is set when the handler should stop: ``cancel_reason`` says why
    (``"lease_lost"``, ``"cancel_requested"`` by an operator, ``"deadline"`` when the task's
    deadline passed, or ``"stopping"`` after the worker's stop timeout). Long handlers should
    check it between steps. The lease is also lost when it runs out by this process's own
    clock without an extension (a broker that does not answer cannot extend it).
    """

    def __init__(
        self,
        task: broker_pb2.LeasedTask,
        broker: broker_pb2_grpc.BrokerServiceStub,
        lease_duration: float,
        valid_until: float | None = None,
        serializer: Serializer | None = None,
    ) -> None:
        self.task = task
        #: Decodes ``dependency_result``; the worker's serializer (JSON by default).
        self.serializer: Serializer = serializer or DEFAULT_SERIALIZER
        self.cancelled = threading.Event()
        self.cancel_reason: str | None = None
        self._broker = broker
        self._lease_duration = lease_duration
        self._lock = threading.Lock()  # the heartbeat thread and the handler both write below
        self._last_checkpoint: bytes | None = task.checkpoint if task.has_checkpoint else None
        self._lost = False
        self._expires_at = task.lease_expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
        # When the lease runs out by this process's clock (time.monotonic()): the send time of
        # the call that granted or last extended it, plus the duration asked for. Never later
        # than the broker's own expiry.
        self._valid_until = time.monotonic() + lease_duration if valid_until is None else valid_until
        self._deadline_fired = False  # the worker's clock thread cancelled it for its deadline
        self._settling = False  # the handler is done; its Complete or Fail is being sent
        self._gave_up = False  # its settle was given up at the lease's expiry
        self._settle_failed = False  # its settle was refused (not LEASE_LOST): logged
        self._left_behind = False  # abandoned at stop (handed back); its result is discarded

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
    def metadata(self) -> dict[str, str]:
        return dict(self.task.metadata)

    @property
    def fencing_token(self) -> int:
        """Pass to downstream stores so they can reject writes from a stale holder."""
        return self.task.fencing_token

    @property
    def last_checkpoint(self) -> bytes | None:
        """The newest checkpoint: this attempt's, else the one an earlier attempt saved."""
        with self._lock:
            return self._last_checkpoint

    @property
    def lease_expires_at(self) -> datetime.datetime:
        """When the lease runs out unless extended, as the broker last said."""
        with self._lock:
            return self._expires_at

    @property
    def deadline(self) -> datetime.datetime | None:
        """The task's deadline, if it has one."""
        if not self.task.HasField("deadline"):
            return None
        return self.task.deadline.ToDatetime(tzinfo=datetime.timezone.utc)

    @property
    def dependency_results(self) -> dict[str, bytes]:
        """The result of each SUCCEEDED dependency of this task (``depends_on``,
        ``depends_on_index``, ``depends_on_keys``), by task id."""
        return dict(self.task.dependency_results)

    def dependency_result(self, task_id: str, type_: type[T]) -> T:
        """One dependency's result decoded as ``type_`` by the worker's serializer (``bytes``:
        as it is). KeyError when ``task_id`` is not a dependency with a result;
        ``PayloadError`` when it does not decode."""
        return context_dependency_result(self.task, task_id, type_, self.serializer)

    @property
    def lost(self) -> bool:
        """True once the lease is known to be lost; the worker then reports nothing."""
        with self._lock:
            return self._lost

    def checkpoint(self, data: bytes, *, timeout: spec.Duration = spec.CALL_TIMEOUT) -> None:
        """Durably stores progress that the next attempt receives; extends the lease.

        Raises LeaseLostError (and sets ``cancelled``) when the lease is gone.
        """
        req = broker_pb2.CheckpointRequest(
            task_id=self.task.task_id,
            lease_token=self.task.lease_token,
            checkpoint=data,
            extend_by=duration(self._lease_duration),
        )
        sent = time.monotonic()
        try:
            resp = self._broker.Checkpoint(req, timeout=spec.seconds(timeout))
        except Exception as err:
            if is_lease_lost(err):
                self._lose("Checkpoint answered LEASE_LOST")
                raise LeaseLostError(f"task {self.task_id}: lease lost") from err
            raise
        with self._lock:
            self._last_checkpoint = data
            self._expires_at = resp.lease_expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
            self._valid_until = max(self._valid_until, sent + self._lease_duration)
        if resp.cancel_requested:
            self._cancel(CANCEL_REQUESTED)

    # Used by the worker.

    def _cancel(self, reason: str) -> None:
        with self._lock:
            if self.cancel_reason is None:
                self.cancel_reason = reason
        self.cancelled.set()

    def _mark_lost(self) -> bool:
        """Marks the lease lost and cancels the handler; True the first time only."""
        with self._lock:
            first = not self._lost
            self._lost = True
        self._cancel(LEASE_LOST)
        return first

    def _lose(self, why: str) -> None:
        """The lease is lost: cancels the handler, and logs it once per task (WARN)."""
        if self._mark_lost():
            log.warning("task %s: lease lost (%s); handler cancelled, nothing more is reported", self.task_id, why)

    def _extended(self, expires_at: datetime.datetime | None, valid_until: float) -> None:
        with self._lock:
            if expires_at is not None:
                self._expires_at = expires_at
            self._valid_until = max(self._valid_until, valid_until)

    def _lease_left(self, now: float) -> float:
        """Seconds until the lease runs out by this process's clock (negative: it has)."""
        with self._lock:
            return self._valid_until - now
