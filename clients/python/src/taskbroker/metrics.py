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
"""

from __future__ import annotations

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
