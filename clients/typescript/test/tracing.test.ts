/**
 * The send and process spans and the messaging instruments (the OpenTelemetry messaging
 * conventions, docs/client-spec.md point 7), read from the SDK's InMemorySpanExporter and a
 * manual metric reader installed as the global providers, against the live broker at
 * $TASKBROKER_ADDR (scripts/conformance.sh typescript starts one; skipped without it).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { afterEach, test } from "node:test";
import { context, metrics, SpanKind, SpanStatusCode, trace, type SpanContext } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { DataPointType, MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics";
import { Client, optionsFromEnv, PermanentError, TaskState, Worker, type TaskContext } from "../src/index.js";

const addr = process.env["TASKBROKER_ADDR"];
const skip = addr ? false : "TASKBROKER_ADDR is not set; needs a live broker";

class ManualReader extends MetricReader {
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

const exporter = new InMemorySpanExporter();
const reader = new ManualReader();
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
const tracer = trace.getTracer("test");

afterEach(() => exporter.reset());

function client(): Client {
  return new Client(addr!, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
}

function queue(name: string): string {
  return `test.typescript.tracing.${name}.${randomBytes(4).toString("hex")}`;
}

function span(name: string): ReadableSpan {
  const found = exporter.getFinishedSpans().filter((s) => s.name === name);
  assert.equal(found.length, 1, `spans named ${name}: ${found.length}`);
  return found[0]!;
}

function traceparent(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${sc.traceFlags.toString(16).padStart(2, "0")}`;
}

/** The points of instrument `name` on `queue`: attributes, and the sum or histogram count. */
async function points(name: string, q: string): Promise<{ attributes: Record<string, unknown>; value: number }[]> {
  const { resourceMetrics } = await reader.collect();
  const out = [];
  for (const scope of resourceMetrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      if (metric.descriptor.name !== name) continue;
      for (const p of metric.dataPoints) {
        if (p.attributes["messaging.destination.name"] !== q) continue;
        const value = metric.dataPointType === DataPointType.HISTOGRAM ? (p.value as { count: number }).count : (p.value as number);
        out.push({ attributes: p.attributes, value });
      }
    }
  }
  return out;
}

async function settle(tb: Client, taskId: string, want: TaskState): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if ((await tb.admin.getTask({ taskId })).task!.state === want) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`task ${taskId} did not reach ${TaskState[want]}`);
}

test("submit sends in a producer span and the handler runs in a linked consumer span", { skip }, async () => {
  const q = queue("submit");
  const tb = client();
  const request = tracer.startSpan("request");
  const { taskId } = await context.with(trace.setSpan(context.active(), request), () => tb.submit(q, { n: 1 }));
  request.end();

  const send = span(`send ${q}`);
  assert.equal(send.kind, SpanKind.PRODUCER);
  assert.equal(send.parentSpanContext?.spanId, request.spanContext().spanId);
  assert.deepEqual(send.attributes, {
    "messaging.system": "taskbroker",
    "messaging.operation.type": "send",
    "messaging.operation.name": "submit",
    "messaging.destination.name": q,
    "messaging.message.id": taskId,
  });
  // The send span's context is the task's creation context.
  assert.equal((await tb.admin.getTask({ taskId })).task!.metadata["traceparent"], traceparent(send.spanContext()));

  let inHandler: SpanContext | undefined;
  let ofTask: SpanContext | undefined;
  const w = new Worker(tb.broker, async (ctx: TaskContext) => {
    inHandler = trace.getSpanContext(context.active());
    ofTask = trace.getSpanContext(ctx.traceContext as never);
    throw new PermanentError("no such image");
  }, { queues: [q], workerId: "test-typescript", pollWaitMs: 1_000, onError: () => {} });
  const run = w.run();
  await settle(tb, taskId, TaskState.DEAD);
  await w.stop(1_000);
  await run;

  const process = span(`process ${q}`);
  assert.equal(process.kind, SpanKind.CONSUMER);
  assert.equal(process.parentSpanContext?.spanId, send.spanContext().spanId);
  assert.equal(process.spanContext().traceId, request.spanContext().traceId);
  assert.deepEqual(process.links.map((l) => l.context.spanId), [send.spanContext().spanId]);
  assert.equal(inHandler?.spanId, process.spanContext().spanId); // active in the handler
  assert.equal(ofTask?.spanId, process.spanContext().spanId); // and its ctx.traceContext
  assert.deepEqual(process.attributes, {
    "messaging.system": "taskbroker",
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
    "messaging.destination.name": q,
    "messaging.message.id": taskId,
    "taskbroker.attempt": 1,
    "error.type": "PermanentError",
  });
  assert.deepEqual(process.status, { code: SpanStatusCode.ERROR, message: "no such image" });

  const [sent] = await points("messaging.client.sent.messages", q);
  assert.equal(sent?.value, 1);
  assert.equal(sent?.attributes["messaging.operation.name"], "submit");
  const [consumed] = await points("messaging.client.consumed.messages", q);
  assert.equal(consumed?.value, 1);
  const duration = await points("messaging.process.duration", q);
  assert.equal(duration.length, 1);
  assert.equal(duration[0]!.value, 1);
  assert.equal(duration[0]!.attributes["error.type"], "PermanentError");
  assert.equal(duration[0]!.attributes["messaging.operation.name"], "process");
  await tb.close();
});

test("a raw batch submit counts its tasks and keeps a creation context the caller set", { skip }, async () => {
  const q = queue("batch");
  const custom = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const tb = client();
  // Through the generated stub: the client's interceptor makes the send span.
  const { results } = await tb.broker.submit({ tasks: [{ queue: q }, { queue: q }, { queue: q, metadata: { traceparent: custom } }] });
  const send = span(`send ${q}`);
  assert.equal(send.parentSpanContext, undefined); // no active span: the send span starts the trace
  assert.equal(send.attributes["messaging.batch.message_count"], 3);
  assert.equal(send.attributes["messaging.message.id"], undefined);
  assert.deepEqual(send.links.map((l) => l.context.traceId), ["4bf92f3577b34da6a3ce929d0e0e4736"]);
  const stored = await Promise.all(results.map(async (r) => (await tb.admin.getTask({ taskId: r.taskId })).task!.metadata["traceparent"]));
  const own = traceparent(send.spanContext());
  assert.deepEqual(stored, [own, own, custom]);
  const [sent] = await points("messaging.client.sent.messages", q);
  assert.equal(sent?.value, 3);
  await tb.close();
});

test("a handler that succeeds leaves its process span unset", { skip }, async () => {
  const q = queue("ok");
  const tb = client();
  const { taskId } = await tb.submit(q, "x");
  const w = new Worker(tb.broker, async () => "ok", { queues: [q], workerId: "test-typescript", pollWaitMs: 1_000 });
  const run = w.run();
  await settle(tb, taskId, TaskState.SUCCEEDED);
  await w.stop(1_000);
  await run;
  const send = span(`send ${q}`);
  const process = span(`process ${q}`);
  assert.equal(process.parentSpanContext?.spanId, send.spanContext().spanId);
  assert.deepEqual(process.links.map((l) => l.context.spanId), [send.spanContext().spanId]);
  assert.equal(process.status.code, SpanStatusCode.UNSET);
  assert.equal(process.attributes["error.type"], undefined);
  const duration = await points("messaging.process.duration", q);
  assert.equal(duration.length, 1);
  assert.equal(duration[0]!.attributes["error.type"], undefined);
  await tb.close();
});
