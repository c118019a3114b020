/**
 * Submits one task and prints its id.
 *   TASKBROKER_ADDR=127.0.0.1:50051 node dist/examples/submit.js
 */
import { Client } from "../src/index.js";

await using client = new Client(process.env["TASKBROKER_ADDR"] ?? "127.0.0.1:50051");
const r = await client.submit<{ to: string }>(
  "emails",
  { to: "ada@example.com" }, // JSON
  { key: "welcome-ada", priority: 5, retry: { maxAttempts: 5 } }, // key: a second submit returns the same task
);
console.log(`task ${r.taskId} (deduplicated: ${r.deduplicated})`);
