"""Spans and messaging metrics of Submit and of the workers (the OpenTelemetry messaging
conventions, docs/client-spec.md point 7), read from the SDK's in-memory exporter and reader,
against a live broker at $TASKBROKER_ADDR (skipped without one)."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from taskbroker import AsyncClient, AsyncWorker, Client, PermanentError, TaskContext, TaskFailedError, Worker
from taskbroker.client import task_spec

ADDR = os.environ.get("TASKBROKER_ADDR")
pytestmark = pytest.mark.skipif(not ADDR, reason="TASKBROKER_ADDR is not set; needs a live broker")

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()
# The client reads the global providers (the worker's meter_provider defaults to it too).
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)
otel_metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
tracer = trace.get_tracer("test")


def queue(name: str) -> str:
    return f"test.python.tracing.{name}.{random.randrange(1 << 32)}"


def spans(name: str) -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name == name]


def traceparent(span: ReadableSpan) -> str:
    sc = span.get_span_context()
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"


def points(name: str, queue: str) -> list[Any]:
    data = READER.get_metrics_data()
    out = []
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    out += [
                        p for p in m.data.data_points if (p.attributes or {}).get("messaging.destination.name") == queue
                    ]
    return out


def test_submit_sends_in_a_producer_span_and_the_handler_runs_in_a_linked_consumer_span() -> None:
    q = queue("sync")
    seen: list[Any] = []
    with Client.from_env(ADDR) as tb:
        with tracer.start_as_current_span("request") as request:
            result = tb.submit(q, b"x")

        (send,) = spans(f"send {q}")
        assert send.kind == SpanKind.PRODUCER
        assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
        assert dict(send.attributes or {}) == {
            "messaging.system": "taskbroker",
            "messaging.operation.type": "send",
            "messaging.operation.name": "submit",
            "messaging.destination.name": q,
            "messaging.message.id": result.task_id,
        }
        # The send span's context is the task's creation context.
        assert tb.get_task(result.task_id).metadata["traceparent"] == traceparent(send)

        def handler(ctx: TaskContext) -> bytes:
            seen.append(trace.get_current_span().get_span_context())
            raise PermanentError("no such image")

        w = Worker(tb, [q], handler, poll_wait=1)
        w.start()
        try:
            with pytest.raises(TaskFailedError):
                tb.wait(result.task_id, timeout=20)
        finally:
            w.stop()

    (process,) = spans(f"process {q}")
    assert process.kind == SpanKind.CONSUMER
    assert process.parent is not None and process.parent.span_id == send.get_span_context().span_id
    assert process.get_span_context().trace_id == request.get_span_context().trace_id
    assert [link.context.span_id for link in process.links] == [send.get_span_context().span_id]
    assert seen == [process.get_span_context()]  # the handler runs inside it
    attrs = dict(process.attributes or {})
    assert {k: attrs[k] for k in attrs if k.startswith("messaging.")} == {
        "messaging.system": "taskbroker",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": q,
        "messaging.message.id": result.task_id,
    }
    assert attrs["error.type"] == "taskbroker.errors.PermanentError"
    assert process.status.status_code == StatusCode.ERROR
    assert process.status.description == "no such image"

    (sent,) = points("messaging.client.sent.messages", q)
    assert sent.value == 1 and sent.attributes["messaging.operation.name"] == "submit"
    (consumed,) = points("messaging.client.consumed.messages", q)
    assert consumed.value == 1 and consumed.attributes["messaging.system"] == "taskbroker"
    (duration,) = points("messaging.process.duration", q)
    assert duration.count == 1
    assert duration.attributes["error.type"] == "taskbroker.errors.PermanentError"
    assert duration.attributes["messaging.operation.name"] == "process"


def test_a_batch_submit_counts_its_tasks_and_keeps_a_creation_context_the_caller_set() -> None:
    q = queue("batch")
    custom = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with Client.from_env(ADDR) as tb:
        with tracer.start_as_current_span("request"):
            specs = [task_spec(q, b"a"), task_spec(q, b"b"), task_spec(q, b"c", metadata={"traceparent": custom})]
            results = tb.submit_many(specs)

        (send,) = spans(f"send {q}")
        attrs = dict(send.attributes or {})
        assert attrs["messaging.batch.message_count"] == 3
        assert "messaging.message.id" not in attrs
        # The send span links to the creation context the caller set, which is kept.
        assert [f"{link.context.trace_id:032x}" for link in send.links] == ["4bf92f3577b34da6a3ce929d0e0e4736"]
        stored = [tb.get_task(r.task_id).metadata["traceparent"] for r in results]
        assert stored == [traceparent(send), traceparent(send), custom]
    (sent,) = points("messaging.client.sent.messages", q)
    assert sent.value == 3


def test_async_handlers_run_in_a_process_span_with_status_unset_on_success() -> None:
    q = queue("aio")

    async def main() -> str:
        async with AsyncClient.from_env(ADDR) as tb:
            task_id = (await tb.submit(q, b"x")).task_id

            async def handler(ctx: Any) -> bytes:
                return b"ok"

            async with AsyncWorker(tb, [q], handler, poll_wait=1):
                await tb.wait(task_id, timeout=20)
            return task_id

    task_id = asyncio.run(main())
    (send,) = spans(f"send {q}")
    (process,) = spans(f"process {q}")
    assert send.parent is None  # no ambient span: the send span starts the trace
    assert process.parent is not None and process.parent.span_id == send.get_span_context().span_id
    assert [link.context.span_id for link in process.links] == [send.get_span_context().span_id]
    assert process.attributes is not None and process.attributes["messaging.message.id"] == task_id
    assert "error.type" not in process.attributes
    assert process.status.status_code == StatusCode.UNSET
    (duration,) = points("messaging.process.duration", q)
    assert duration.count == 1 and "error.type" not in duration.attributes


def test_without_opentelemetry_installed_submit_and_the_worker_still_run() -> None:
    script = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from taskbroker import Client, Worker
q = sys.argv[1]
with Client.from_env(sys.argv[2]) as tb:
    r = tb.submit(q, b"x")
    w = Worker(tb, [q], lambda ctx: b"done:" + ctx.payload, poll_wait=1)
    w.start()
    try:
        task = tb.wait(r.task_id, timeout=20)
    finally:
        w.stop()
    assert "traceparent" not in task.metadata, task.metadata
    print(task.result.decode())
"""
    out = subprocess.run(
        [sys.executable, "-c", script, queue("nootel"), ADDR or ""],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done:x"
