"""Tracing across the queue through the OpenTelemetry API (docs/client-spec.md, point 7),
following the OpenTelemetry messaging semantic conventions. ``opentelemetry-api`` is optional
(extra ``otel``): without it nothing is traced or propagated; with the API but no SDK the spans
are no-ops and only the W3C trace context travels.

- Submit runs in a ``send {queue}`` span (kind PRODUCER; ``messaging.operation.name`` is
  ``submit``). Its context is the tasks' creation context: it goes into each task's
  ``metadata["traceparent"]`` unless the caller set one (a task spec built by ``task_spec`` in
  the same context as the Submit carries the ambient traceparent, which counts as unset), and
  the span links to each creation context that the caller set. It is also the call's
  ``traceparent`` header.
- A worker runs each handler in a ``process {queue}`` span (kind CONSUMER) whose parent is the
  task's stored traceparent and which links to that same context, so the handler's spans join
  the producer's trace. A handler that raises ends it with status ERROR and ``error.type``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

from taskbroker import metrics

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: TraceContextTextMapPropagator | None = TraceContextTextMapPropagator()
except ImportError:  # pragma: no cover -- the extra is not installed
    _PROPAGATOR = None

TRACEPARENT = "traceparent"
TRACER_NAME = "taskbroker"
SYSTEM = "taskbroker"


def current_headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current context; empty without a span."""
    carrier: dict[str, str] = {}
    if _PROPAGATOR is not None:
        _PROPAGATOR.inject(carrier)
    return carrier


def inject(metadata: MutableMapping[str, str]) -> None:
    """Writes the current traceparent into a task's metadata, unless it has one."""
    if TRACEPARENT in metadata:
        return
    tp = current_headers().get(TRACEPARENT)
    if tp:
        metadata[TRACEPARENT] = tp


@contextlib.contextmanager
def task_context(metadata: Mapping[str, str]) -> Iterator[None]:
    """Runs the block in the context of the task's stored traceparent (the producer's)."""
    if _PROPAGATOR is None or TRACEPARENT not in metadata:
        yield
        return
    token = otel_context.attach(_PROPAGATOR.extract(dict(metadata)))
    try:
        yield
    finally:
        otel_context.detach(token)


def _fail(span: Any, exc: BaseException) -> None:
    span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, str(exc) or type(exc).__name__))
    span.set_attribute("error.type", metrics.error_type(exc))
    span.record_exception(exc)


class SendSpan:
    """The ``send`` span of one Submit call; ``sent(results)`` names the task id of a
    single-task Submit (``messaging.message.id``) and passes the results through."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def sent(self, results: list[Any]) -> list[Any]:
        if self._span is not None and len(results) == 1 and self._span.is_recording():
            self._span.set_attribute("messaging.message.id", results[0].task_id)
        return results


def _queue_of(tasks: Sequence[Any]) -> str:
    """The queue every task names, or "" when they name several."""
    queues = {t.queue for t in tasks}
    return queues.pop() if len(queues) == 1 else ""


@contextlib.contextmanager
def send_span(tasks: Sequence[Any]) -> Iterator[SendSpan]:
    """Runs a Submit of ``tasks`` (TaskSpecs, whose metadata this fills in) in its ``send``
    span, and counts them in ``messaging.client.sent.messages``."""
    n = len(tasks)
    if _PROPAGATOR is None:
        try:
            yield SendSpan(None)
        except BaseException as exc:
            metrics.sent(tasks, exc)
            raise
        metrics.sent(tasks, None)
        return
    ambient = current_headers().get(TRACEPARENT)
    queue = _queue_of(tasks)
    attrs: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "submit",
    }
    if queue:
        attrs["messaging.destination.name"] = queue
    if n > 1:
        attrs["messaging.batch.message_count"] = n
    # A traceparent that differs from the ambient one was set by the caller: it is that
    # task's creation context, kept as it is and linked from the send span.
    links = []
    for t in tasks:
        tp = t.metadata.get(TRACEPARENT)
        if tp and tp != ambient:
            sc = otel_trace.get_current_span(_PROPAGATOR.extract({TRACEPARENT: tp})).get_span_context()
            if sc.is_valid:
                links.append(otel_trace.Link(sc))
    tracer = otel_trace.get_tracer(TRACER_NAME)
    span = tracer.start_span(
        f"send {queue}" if queue else "send", kind=otel_trace.SpanKind.PRODUCER, attributes=attrs, links=links
    )
    # Without an SDK the span is invalid: the ambient context travels instead, as before.
    use = span.get_span_context().is_valid
    token = otel_context.attach(otel_trace.set_span_in_context(span)) if use else None
    try:
        own = current_headers().get(TRACEPARENT)
        if own:
            for t in tasks:
                if t.metadata.get(TRACEPARENT, ambient) == ambient:
                    t.metadata[TRACEPARENT] = own
        yield SendSpan(span)
    except BaseException as exc:
        _fail(span, exc)
        metrics.sent(tasks, exc)
        raise
    else:
        metrics.sent(tasks, None)
    finally:
        if token is not None:
            otel_context.detach(token)
        span.end()


@contextlib.contextmanager
def process_span(task: Any, worker_metrics: metrics.WorkerMetrics | None = None) -> Iterator[None]:
    """Runs a leased task's handler in its ``process`` span, and counts it in
    ``messaging.client.consumed.messages`` and ``messaging.process.duration`` of
    ``worker_metrics``."""
    if worker_metrics is not None:
        worker_metrics.consumed(task.queue)
    started = time.monotonic()
    failed: BaseException | None = None
    try:
        with _process_span(task):
            yield
    except BaseException as exc:
        failed = exc
        raise
    finally:
        if worker_metrics is not None:
            worker_metrics.processed(task.queue, time.monotonic() - started, failed)


@contextlib.contextmanager
def _process_span(task: Any) -> Iterator[None]:
    if _PROPAGATOR is None:
        yield
        return
    parent = _PROPAGATOR.extract(dict(task.metadata)) if TRACEPARENT in task.metadata else otel_context.Context()
    creation = otel_trace.get_current_span(parent).get_span_context()
    span = otel_trace.get_tracer(TRACER_NAME).start_span(
        f"process {task.queue}",
        context=parent,
        kind=otel_trace.SpanKind.CONSUMER,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": task.queue,
            "messaging.message.id": task.task_id,
            "taskbroker.attempt": task.attempt,
        },
        links=[otel_trace.Link(creation)] if creation.is_valid else None,
    )
    # Without an SDK the span is invalid: the handler runs in the stored context instead.
    inner = otel_trace.set_span_in_context(span, parent) if span.get_span_context().is_valid else parent
    token = otel_context.attach(inner)
    try:
        yield
    except BaseException as exc:
        _fail(span, exc)
        raise
    finally:
        otel_context.detach(token)
        span.end()
