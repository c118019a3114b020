"""Worker metrics through the OpenTelemetry metrics API (docs/client-spec.md, point 15), from
the meter named ``taskbroker``. ``opentelemetry-api`` is optional (extra ``otel``): without
it, or without an SDK installed by the application, nothing is recorded.

| instrument | kind | attributes |
|---|---|---|
| ``taskbroker.worker.tasks`` | counter | ``queue``, ``outcome`` (succeeded, failed, lease_lost, cancelled) |
| ``taskbroker.worker.task.duration`` | histogram, seconds | ``queue``, ``outcome`` |
| ``taskbroker.worker.leases.lost`` | counter | ``queue`` |
| ``taskbroker.worker.settle.retries`` | counter | ``queue`` |
| ``taskbroker.worker.settle.calls`` | counter | ``rpc`` (Complete, CompleteMany, Fail) |
| ``messaging.client.consumed.messages`` | counter | the messaging attributes below |
| ``messaging.process.duration`` | histogram, seconds | the messaging attributes, ``error.type`` when the handler raised |
| ``messaging.client.sent.messages`` | counter | the messaging attributes, ``error.type`` when Submit failed |

The ``messaging.*`` instruments follow the OpenTelemetry messaging semantic conventions:
``messaging.system`` (taskbroker), ``messaging.destination.name`` (the queue) and
``messaging.operation.name`` (submit, process). The worker's come from its ``meter_provider``;
``messaging.client.sent.messages`` (counted by ``Client.submit_many`` and
``AsyncClient.submit_many``) from the global meter provider.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskbroker.v1 import broker_pb2

try:
    from opentelemetry import metrics as otel_metrics
except ImportError:  # pragma: no cover -- the extra is not installed
    otel_metrics = None  # type: ignore[assignment]

METER_NAME = "taskbroker"

SUCCEEDED = "succeeded"
FAILED = "failed"
LEASE_LOST = "lease_lost"
CANCELLED = "cancelled"


class WorkerMetrics:
    """The instruments of one worker, from ``meter_provider`` (default: the global one)."""

    def __init__(self, meter_provider: Any = None) -> None:
        self._on = otel_metrics is not None
        if not self._on:
            return
        meter = (meter_provider or otel_metrics.get_meter_provider()).get_meter(METER_NAME)
        self._tasks = meter.create_counter(
            "taskbroker.worker.tasks", unit="{task}", description="Tasks handled, by queue and outcome"
        )
        self._duration = meter.create_histogram(
            "taskbroker.worker.task.duration", unit="s", description="Handler run time, by queue and outcome"
        )
        self._lost = meter.create_counter(
            "taskbroker.worker.leases.lost", unit="{lease}", description="Leases lost (broker's answer or local clock)"
        )
        self._retries = meter.create_counter(
            "taskbroker.worker.settle.retries", unit="{retry}", description="Complete and Fail sent again"
        )
        self._calls = meter.create_counter(
            "taskbroker.worker.settle.calls", unit="{call}", description="Complete, CompleteMany and Fail calls sent"
        )
        self._consumed = meter.create_counter(
            "messaging.client.consumed.messages", unit="{message}", description="Leased tasks delivered to a handler"
        )
        self._process = meter.create_histogram(
            "messaging.process.duration", unit="s", description="Handler run time (messaging conventions)"
        )

    def task(self, queue: str, outcome: str, seconds: float) -> None:
        if self._on:
            attrs = {"queue": queue, "outcome": outcome}
            self._tasks.add(1, attrs)
            self._duration.record(seconds, attrs)
            if outcome == LEASE_LOST:
                self._lost.add(1, {"queue": queue})

    def settle_retry(self, queue: str) -> None:
        if self._on:
            self._retries.add(1, {"queue": queue})

    def settle_call(self, rpc: str) -> None:
        if self._on:
            self._calls.add(1, {"rpc": rpc})

    def consumed(self, queue: str) -> None:
        if self._on:
            self._consumed.add(1, messaging_attributes(queue, "process"))

    def processed(self, queue: str, seconds: float, error: BaseException | None) -> None:
        if self._on:
            self._process.record(seconds, messaging_attributes(queue, "process", error))


def messaging_attributes(queue: str, operation: str, error: BaseException | None = None) -> dict[str, str]:
    """The attributes of the ``messaging.*`` instruments; ``error.type`` only on failure."""
    attrs = {
        "messaging.system": "taskbroker",
        "messaging.destination.name": queue,
        "messaging.operation.name": operation,
    }
    if error is not None:
        attrs["error.type"] = error_type(error)
    return attrs


def error_type(exc: BaseException) -> str:
    """``error.type`` of an exception: a gRPC status code's name (``UNAVAILABLE``), else the
    exception's class (``ValueError``, ``mypkg.errors.Timeout``)."""
    code = getattr(exc, "code", None)
    if callable(code):
        try:
            name = getattr(code(), "name", None)
        except Exception:  # noqa: BLE001 -- an exception whose code() is something else
            name = None
        if isinstance(name, str):
            return name
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


_sent_counter: Any = None


def sent(tasks: Sequence[Any], error: BaseException | None) -> None:
    """Counts a Submit's tasks in ``messaging.client.sent.messages`` (global meter provider),
    by queue."""
    global _sent_counter
    if otel_metrics is None:
        return
    if _sent_counter is None:
        # The global meter is a proxy until the application installs an SDK, so it is
        # created once and follows a provider set later.
        _sent_counter = otel_metrics.get_meter(METER_NAME).create_counter(
            "messaging.client.sent.messages", unit="{message}", description="Tasks sent in Submit calls"
        )
    by_queue: dict[str, int] = {}
    for t in tasks:
        by_queue[t.queue] = by_queue.get(t.queue, 0) + 1
    for queue, n in by_queue.items():
        _sent_counter.add(n, messaging_attributes(queue, "submit", error))


def outcome(ctx: Any, error: BaseException | None, response: Any) -> str:
    """A settled task's outcome: lease_lost (lost, or its settle given up at the lease's
    expiry), succeeded (completed), cancelled (an operator's cancel, or the broker answered
    CANCELLED), else failed."""
    if ctx.lost or ctx._gave_up:
        return LEASE_LOST
    if error is None and response is not None and not ctx._settle_failed:
        return SUCCEEDED
    if ctx.cancel_reason == "cancel_requested" or getattr(response, "state", None) == _CANCELLED_STATE:
        return CANCELLED
    return FAILED


_CANCELLED_STATE = broker_pb2.TASK_STATE_CANCELLED
