"""W3C trace context across the queue through the OpenTelemetry API (docs/client-spec.md,
point 7). ``opentelemetry-api`` is optional (extra ``otel``): without it nothing is propagated.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping

try:
    from opentelemetry import context as otel_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: TraceContextTextMapPropagator | None = TraceContextTextMapPropagator()
except ImportError:  # pragma: no cover -- the extra is not installed
    _PROPAGATOR = None

TRACEPARENT = "traceparent"


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
