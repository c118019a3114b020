/**
 * The conformance case `idempotent_submit`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { Env, check } from "../../../typescript/conformance/contract.js";

export default async (env: Env): Promise<void> => {
  const first = await env.broker.submit({ tasks: [{ queue: env.queue, key: "order-42" }] });
  const second = await env.broker.submit({ tasks: [{ queue: env.queue, key: "order-42" }] });
  const a = first.results[0];
  const b = second.results[0];
  check(a !== undefined && b !== undefined, "Submit returned no result");
  check(a.taskId === b.taskId, `task ids differ: ${a.taskId} then ${b.taskId}`);
  check(!a.deduplicated && b.deduplicated, `deduplicated ${a.deduplicated} then ${b.deduplicated}, want false then true`);
};
