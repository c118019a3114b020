/**
 * The conformance case `typed_handlers`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { randomBytes } from "node:crypto";
import { Metrics } from "../../../typescript/conformance/metric_reader.js";
import { A, B, Out, TypedEnv, WORKER_ID, check } from "../../../typescript/conformance/typed.js";
import { TaskState, waitAll, Worker, type Middleware } from "../../../typescript/src/index.js";

export default async ({ client }: TypedEnv): Promise<void> => {
  const rand = randomBytes(3).toString("hex");
  const qa = `conf.typescript.typed_a.${rand}`;
  const qb = `conf.typescript.typed_b.${rand}`;
  const metrics = new Metrics();
  const seen: string[] = [];
  const received: string[] = [];
  const observe: Middleware = async (ctx, next) => {
    try {
      const result = await next();
      seen.push(`${ctx.taskId} ${ctx.queue} success`);
      return result;
    } catch (err) {
      seen.push(`${ctx.taskId} ${ctx.queue} failure`);
      throw err;
    }
  };
  const worker = new Worker(client, {
    workerId: WORKER_ID,
    pollWaitMs: 1_000,
    middleware: [observe],
    meterProvider: metrics.provider,
    logger: { warn: console.warn, error: () => {} },
  })
    .handle<A, Out>(
      qa,
      (a) => {
        received.push(`A to=${a.to} n=${a.n}`);
        return { ok: true, n: a.n };
      },
      { type: "A" },
    )
    .handle<B, Out>(qb, async (b) => {
      received.push(`B n=${b.n}`);
      return { ok: true, n: b.n };
    }, { type: "B" });
  const a = await client.submit<A>(qa, { to: "a@example.com", n: 1 });
  const b = await client.submit<B>(qb, { n: 2 });
  const bad = await client.submit(qa, new TextEncoder().encode("not json"));
  const run = worker.run({ handleSignals: false });
  let tasks;
  try {
    tasks = await waitAll(client, [a.taskId, b.taskId, bad.taskId], { timeoutMs: 20_000 });
  } finally {
    await worker.stop(5_000); // settles are answered (and counted) once it returns
    await run;
  }
  const [ta, tb, tbad] = tasks;
  check(
    ta!.state === TaskState.SUCCEEDED && tb!.state === TaskState.SUCCEEDED,
    `typed tasks are ${TaskState[ta!.state]} (${ta!.lastError}) and ${TaskState[tb!.state]} (${tb!.lastError}), want SUCCEEDED`,
  );
  check(
    received.sort().join("; ") === "A to=a@example.com n=1; B n=2",
    `the handlers received [${received.join("; ")}], want A to=a@example.com n=1 and B n=2`,
  );
  const ra = await client.getResult<Out>(a.taskId);
  const rb = await client.getResult<Out>(b.taskId);
  check(ra.ok === true && ra.n === 1, `task A result ${JSON.stringify(ra)}, want {"ok":true,"n":1}`);
  check(rb.ok === true && rb.n === 2, `task B result ${JSON.stringify(rb)}, want {"ok":true,"n":2}`);
  for (const want of [`${a.taskId} ${qa} success`, `${b.taskId} ${qb} success`]) {
    check(seen.includes(want), `the middleware saw [${seen.join("; ")}], missing "${want}"`);
  }
  for (const q of [qa, qb]) {
    const n = await metrics.sum("taskbroker.worker.tasks", { queue: q, outcome: "succeeded" });
    check(n === 1, `taskbroker.worker.tasks{queue=${q},outcome=succeeded} is ${n}, want 1`);
  }
  check(tbad!.state === TaskState.DEAD, `the "not json" task is ${TaskState[tbad!.state]}, want DEAD`);
  check(
    tbad!.lastError.includes(qa) && tbad!.lastError.includes("payload is not a valid A: "),
    `last_error ${JSON.stringify(tbad!.lastError)} does not name the queue and the decode failure`,
  );
  check(tbad!.attempt === 1, `the "not json" task ran ${tbad!.attempt} attempts, want 1 (non-retryable)`);
};
