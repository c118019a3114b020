/** The submit rule for backpressure (RESOURCE_EXHAUSTED with a RetryInfo: wait the hint, at
 * most 5 s, at most 3 resends) and the typed reader of a dependency's result. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import {
  Code,
  connect,
  ConnectError,
  DEFAULTS,
  LeasedTaskSchema,
  RetryInfoSchema,
  SerializationError,
  submitRetryDelayMs,
  TaskContext,
} from "../src/index.js";

function refusal(code: Code, delayMs?: number): ConnectError {
  const details =
    delayMs === undefined
      ? []
      : [{ desc: RetryInfoSchema, value: { retryDelay: { seconds: BigInt(Math.floor(delayMs / 1000)), nanos: (delayMs % 1000) * 1e6 } } }];
  return new ConnectError("queue q is full", code, undefined, details);
}

test("submitRetryDelayMs follows the RetryInfo within its bounds", () => {
  assert.equal(submitRetryDelayMs(refusal(Code.ResourceExhausted, 1_500), 0), 1_500);
  assert.equal(submitRetryDelayMs(refusal(Code.ResourceExhausted, 60_000), 2), DEFAULTS.submitRetryMaxDelayMs);
  assert.equal(submitRetryDelayMs(refusal(Code.ResourceExhausted, 1_000), DEFAULTS.submitRetries), undefined);
  assert.equal(submitRetryDelayMs(refusal(Code.ResourceExhausted), 0), undefined, "no RetryInfo: not retried");
  assert.equal(submitRetryDelayMs(refusal(Code.Unavailable, 1_000), 0), undefined, "another code: not retried");
  assert.equal(submitRetryDelayMs(new Error("plain"), 0), undefined);
});

test("dependencyResult decodes a dependency's result with the worker's serializer", () => {
  const { broker } = connect("127.0.0.1:1");
  const task = create(LeasedTaskSchema, {
    taskId: "b",
    dependencyResults: { a: new TextEncoder().encode('{"n":7}'), raw: new TextEncoder().encode("not json") },
  });
  const ctx = new TaskContext(broker, task);
  assert.deepEqual(ctx.dependencyResult<{ n: number }>("a"), { n: 7 });
  assert.equal(new TextDecoder().decode(ctx.dependencyResults["raw"]), "not json");
  assert.throws(() => ctx.dependencyResult("raw"), (e) => e instanceof SerializationError && /dependency raw/.test(e.message));
  assert.throws(() => ctx.dependencyResult("missing"), (e) => e instanceof SerializationError && /missing/.test(e.message));
});
