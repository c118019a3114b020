/**
 * The conformance case `checkpoint_extends`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { SpecEnv, check, submit, waitState, worker } from "../../../typescript/conformance/spec.js";
import { TaskState } from "../../../typescript/src/index.js";

export default async (env: SpecEnv): Promise<void> => {
  const id = await submit(env);
  let leased = 0;
  let after = 0;
  const w = worker(
    env,
    async (ctx) => {
      leased = ctx.leaseExpiresAt.getTime();
      await new Promise((r) => setTimeout(r, 100));
      await ctx.checkpoint("half");
      after = ctx.leaseExpiresAt.getTime();
      return "ok";
    },
    { leaseDurationMs: 4_000 },
  );
  const run = w.run();
  const s = await waitState(env, id, TaskState.SUCCEEDED);
  await w.close();
  await run;
  check(s === TaskState.SUCCEEDED, `state ${TaskState[s]}, want SUCCEEDED`);
  check(after > leased, `expiry ${leased} -> ${after}: the checkpoint did not extend the lease`);
};
