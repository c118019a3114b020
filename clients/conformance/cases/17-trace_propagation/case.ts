/**
 * The conformance case `trace_propagation`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { context, trace, TraceFlags } from "@opentelemetry/api";
import { SpecEnv, TRACEPARENT, TRACE_ID, check, submit, within, worker } from "../../../typescript/conformance/spec.js";

export default async (env: SpecEnv): Promise<void> => {
  const sc = { traceId: TRACE_ID, spanId: "00f067aa0ba902b7", traceFlags: TraceFlags.SAMPLED, isRemote: true };
  const id = await context.with(trace.setSpanContext(context.active(), sc), () => submit(env));
  const tp = (await env.admin.getTask({ taskId: id })).task!.metadata["traceparent"];
  check(tp === TRACEPARENT, `metadata traceparent ${tp}, want ${TRACEPARENT}`);
  let resolveSeen: (s: string | undefined) => void = () => {};
  const seen = new Promise<string | undefined>((r) => (resolveSeen = r));
  const w = worker(env, async () => {
    resolveSeen(trace.getSpanContext(context.active())?.traceId);
  });
  const run = w.run();
  try {
    const got = await within(20_000, seen, "the handler never ran");
    check(got === TRACE_ID, `handler saw trace id ${got}, want ${TRACE_ID}`);
  } finally {
    await w.close();
    await run;
  }
};
