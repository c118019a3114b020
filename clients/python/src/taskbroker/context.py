"""TaskContext: what a handler gets for one leased task."""

from __future__ import annotations

import datetime
import threading
from typing import TYPE_CHECKING

from taskbroker import spec
from taskbroker.client import duration
from taskbroker.errors import LeaseLostError, is_lease_lost
from taskbroker.v1 import broker_pb2

if TYPE_CHECKING:
    from taskbroker.v1 import broker_pb2_grpc

#: Why ``TaskContext.cancelled`` was set.
LEASE_LOST = "lease_lost"
CANCEL_REQUESTED = "cancel_requested"
STOPPING = "stopping"
DEADLINE = "deadline"


class TaskContext:
    """One leased task as a handler sees it.

    ``cancelled`` is set when the handler should stop: ``cancel_reason`` says why
    (``"lease_lost"``, ``"cancel_requested"`` by an operator, ``"deadline"`` when the task's
    deadline passed, or ``"stopping"`` after the worker's stop timeout). Long handlers should
    check it between steps.
    """

    def __init__(
        self,
        task: broker_pb2.LeasedTask,
        broker: broker_pb2_grpc.BrokerServiceStub,
        lease_duration: float,
    ) -> None:
        self.task = task
        self.cancelled = threading.Event()
        self.cancel_reason: str | None = None
        self._broker = broker
        self._lease_duration = lease_duration
        self._lock = threading.Lock()  # the heartbeat thread and the handler both write below
        self._last_checkpoint: bytes | None = task.checkpoint if task.has_checkpoint else None
        self._lost = False
        self._expires_at = task.lease_expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
        self._deadline_timer: threading.Timer | None = None  # set by the worker

    @property
    def task_id(self) -> str:
        return self.task.task_id

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
    def lost(self) -> bool:
        """True once the lease is known to be lost; the worker then reports nothing."""
        with self._lock:
            return self._lost

    def checkpoint(self, data: bytes, *, timeout: float = spec.CALL_TIMEOUT) -> None:
        """Durably stores progress that the next attempt receives; extends the lease.

        Raises LeaseLostError (and sets ``cancelled``) when the lease is gone.
        """
        req = broker_pb2.CheckpointRequest(
            task_id=self.task.task_id,
            lease_token=self.task.lease_token,
            checkpoint=data,
            extend_by=duration(self._lease_duration),
        )
        try:
            resp = self._broker.Checkpoint(req, timeout=timeout)
        except Exception as err:
            if is_lease_lost(err):
                self._mark_lost()
                raise LeaseLostError(f"task {self.task_id}: lease lost") from err
            raise
        with self._lock:
            self._last_checkpoint = data
            self._expires_at = resp.lease_expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
        if resp.cancel_requested:
            self._cancel(CANCEL_REQUESTED)

    # Used by the worker.

    def _cancel(self, reason: str) -> None:
        with self._lock:
            if self.cancel_reason is None:
                self.cancel_reason = reason
        self.cancelled.set()

    def _mark_lost(self) -> None:
        with self._lock:
            self._lost = True
        self._cancel(LEASE_LOST)

    def _extended(self, expires_at: datetime.datetime) -> None:
        with self._lock:
            self._expires_at = expires_at

    def _expired(self, now: datetime.datetime) -> bool:
        with self._lock:
            return now > self._expires_at
