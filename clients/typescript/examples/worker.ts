/**
 * Runs a worker on queues "emails" and "reports" until SIGINT/SIGTERM, then drains.
 *   TASKBROKER_ADDR=127.0.0.1:50051 node dist/examples/worker.js
 */
import { Client, optionsFromEnv, PermanentError, Worker, type Middleware, type TaskContext } from "../src/index.js";

interface Email {
  to: string;
}

// TASKBROKER_TOKEN / _CA / _CLIENT_CERT / _CLIENT_KEY add a token and TLS when set.
await using client = new Client(process.env["TASKBROKER_ADDR"] ?? "127.0.0.1:50051", optionsFromEnv());

async function sendEmail(email: Email, ctx: TaskContext): Promise<{ sentTo: string }> {
  if (!email.to) throw new PermanentError("no recipient"); // goes DEAD, no retry
  const done = ctx.lastCheckpoint ? new TextDecoder().decode(ctx.lastCheckpoint) : "none";
  console.log(`attempt ${ctx.attempt} for ${email.to}, last checkpoint: ${done}`);
  ctx.signal.throwIfAborted(); // lease lost or task cancelled: stop here
  await ctx.checkpoint("rendered");
  return { sentTo: email.to }; // becomes the task's result (JSON)
}

const logged: Middleware = async (ctx, next) => {
  const t0 = performance.now();
  try {
    return await next();
  } finally {
    console.log(`${ctx.queue} ${ctx.taskId}: ${Math.round(performance.now() - t0)} ms`);
  }
};

const worker = new Worker(client, { concurrency: 8, middleware: [logged] })
  .handle<Email, { sentTo: string }>("emails", sendEmail, { type: "Email" })
  .handle<{ day: string }, { pages: number }>("reports", async ({ day }) => ({ pages: day.length }));
await worker.run(); // SIGTERM or Ctrl-C: stop leasing, drain, resolve
