/**
 * Runs a worker on queue "emails" until SIGINT/SIGTERM, then drains.
 *   TASKBROKER_ADDR=127.0.0.1:50051 node dist/examples/worker.js
 */
import { connect, optionsFromEnv, PermanentError, Worker, type TaskContext } from "../src/index.js";

// TASKBROKER_TOKEN / _CA / _CLIENT_CERT / _CLIENT_KEY add a token and TLS when set.
const { broker } = connect(process.env["TASKBROKER_ADDR"] ?? "127.0.0.1:50051", optionsFromEnv());

async function sendEmail(ctx: TaskContext): Promise<string> {
  let job: { to?: string };
  try {
    job = JSON.parse(new TextDecoder().decode(ctx.payload)) as { to?: string };
  } catch (err) {
    throw new PermanentError("payload is not JSON", { cause: err }); // goes DEAD, no retry
  }
  const done = ctx.lastCheckpoint ? new TextDecoder().decode(ctx.lastCheckpoint) : "none";
  console.log(`attempt ${ctx.attempt} for ${job.to}, last checkpoint: ${done}`);
  ctx.signal.throwIfAborted(); // lease lost or task cancelled: stop here
  await ctx.checkpoint("rendered");
  return `sent to ${job.to}`; // becomes the task's result
}

const worker = new Worker(broker, sendEmail, { queues: ["emails"], concurrency: 8 });
await worker.run({ handleSignals: true }); // SIGTERM or Ctrl-C: stop leasing, drain, resolve
