"""The conformance case ``trace_propagation``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

from conformance import Cases
from conformance_spec import TRACE_ID, TRACEPARENT, State, check


def trace_propagation(self: Cases, q: str) -> None:
    from opentelemetry import context, trace

    sc = trace.SpanContext(
        trace_id=int(TRACE_ID, 16),
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(sc)))
    try:
        task_id = self.tb.submit(q).task_id
    finally:
        context.detach(token)
    tp = self._get(task_id).metadata.get("traceparent")
    check(tp == TRACEPARENT, f"metadata traceparent {tp!r}, want {TRACEPARENT!r}")
    seen: list[str] = []

    def handler(ctx):  # type: ignore[no-untyped-def]
        seen.append(format(trace.get_current_span().get_span_context().trace_id, "032x"))
        return b""

    with self._worker(q, handler):
        self._wait_state(task_id, State.TASK_STATE_SUCCEEDED)
    check(seen == [TRACE_ID], f"handler saw trace ids {seen}, want [{TRACE_ID}]")
