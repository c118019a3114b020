/**
 * Submits one task and prints its id.
 *   TASKBROKER_ADDR=127.0.0.1:50051 node dist/examples/submit.js
 */
import { connect } from "../src/index.js";

const { broker } = connect(process.env["TASKBROKER_ADDR"] ?? "127.0.0.1:50051");
const res = await broker.submit({
  tasks: [
    {
      queue: "emails",
      payload: new TextEncoder().encode(JSON.stringify({ to: "ada@example.com" })),
      key: "welcome-ada", // idempotency key: a second submit returns the same task
      priority: 5,
      retry: { maxAttempts: 5 },
    },
  ],
});
const r = res.results[0]!;
console.log(`task ${r.taskId} (deduplicated: ${r.deduplicated})`);
