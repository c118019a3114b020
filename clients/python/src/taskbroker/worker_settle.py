"""How the sync Worker reports an attempt: Complete or Fail retried while the broker is
unreachable, the Fail request for a failed attempt, and the hand-back at stop. The Worker
calls these; ``taskbroker.worker`` re-exports ``_fail_request``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from taskbroker import metrics, spec
from taskbroker.client import duration
from taskbroker.context import STOPPING, TaskContext
from taskbroker.errors import PermanentError, RetryableError, is_lease_lost
from taskbroker.v1 import broker_pb2, broker_pb2_grpc

log = logging.getLogger("taskbroker.worker")


def report(
    broker: broker_pb2_grpc.BrokerServiceStub,
    worker_metrics: metrics.WorkerMetrics,
    ctx: TaskContext,
    method: str,
    request: broker_pb2.CompleteRequest | broker_pb2.FailRequest,
    call_timeout: Callable[[], float],
    abandon: threading.Event,
) -> Any:
    """Sends Complete or Fail, retrying while the broker is unreachable (both are
    idempotent for one lease token) until the lease is about to run out; returns the
    answer, or None (LEASE_LOST, given up, another error: each logged). ``abandon`` set
    (the stop margin ran out) ends the retries."""
    failures = 0
    while True:
        try:
            worker_metrics.settle_call(method)
            return getattr(broker, method)(request, timeout=call_timeout())
        except grpc.RpcError as err:
            if is_lease_lost(err):
                ctx._lose(f"{method} answered LEASE_LOST")
                return None
            if err.code() not in spec.REPORT_RETRY_CODES:
                log.error("task %s: %s failed: %s", ctx.task_id, method, _describe(err))
                ctx._settle_failed = True
                return None
            pause = spec.backoff(failures)
            failures += 1
            if ctx.lost:
                return None  # the clock thread found the lease run out, and said so
            if ctx._lease_left(time.monotonic() + pause) < spec.SETTLE_MARGIN:
                log.warning(
                    "task %s: %s given up, the lease runs out before the broker answered (%s)",
                    ctx.task_id, method, _describe(err),
                )
                ctx._gave_up = True
                return None
            worker_metrics.settle_retry(ctx.queue)
            log.warning("task %s: %s failed, retrying in %.1fs: %s", ctx.task_id, method, pause, _describe(err))
        if abandon.wait(pause):
            return None


def hand_back(broker: broker_pb2_grpc.BrokerServiceStub, ctxs: list[TaskContext], timeout: float) -> None:
    """Fails each task retryable with retry_after 0 (READY at once for another worker),
    all at once, each call within ``timeout``."""
    calls = []
    for c in ctxs:
        req = broker_pb2.FailRequest(
            task_id=c.task_id, lease_token=c.task.lease_token, error_message=spec.HANDBACK_MESSAGE
        )
        req.retry_after.CopyFrom(duration(0))
        calls.append((c, broker.Fail.future(req, timeout=timeout)))
    for c, call in calls:
        try:
            call.result()
            log.warning("task %s: handler still running at stop; task handed back", c.task_id)
        except grpc.RpcError as err:
            log.warning(
                "task %s: handler still running at stop; hand-back failed (%s), the task waits for its lease to expire",
                c.task_id, _describe(err),
            )



def _describe(err: grpc.RpcError) -> str:
    """A failed call in one plain line: its code and the library's details."""
    code = err.code() if isinstance(err, grpc.Call) else None
    details = err.details() if isinstance(err, grpc.Call) else str(err)
    return f"{code.name if code else 'error'}: {details}"


def _fail_request(ctx: TaskContext, error: BaseException) -> broker_pb2.FailRequest:
    req = broker_pb2.FailRequest(task_id=ctx.task_id, lease_token=ctx.task.lease_token)
    if ctx.cancel_reason == STOPPING and not isinstance(error, PermanentError):
        # Cut off by the stop timeout: handed back, READY at once for another worker.
        req.error_message = spec.HANDBACK_MESSAGE
        req.retry_after.CopyFrom(duration(0))
        return req
    if isinstance(error, PermanentError):
        req.error_message = str(error)
        req.non_retryable = True
    elif isinstance(error, RetryableError):
        req.error_message = str(error)
        if error.retry_after is not None:
            req.retry_after.CopyFrom(duration(error.retry_after))
        req.prefer_same_worker = error.prefer_same_worker
        cooldown = error.cooldown()
        if cooldown is not None:
            req.cooldown.CopyFrom(cooldown)
    else:
        req.error_message = f"{type(error).__name__}: {error}"
    return req
