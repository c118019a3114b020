/**
 * The conformance case `drain_on_sigterm`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { SpecEnv, check, state, submit, within, worker } from "../../../typescript/conformance/spec.js";
import { TaskState } from "../../../typescript/src/index.js";

export default async (env: SpecEnv): Promise<void> => {
  const a = await submit(env, { payload: new TextEncoder().encode("a") });
  let started: () => void = () => {};
  const running = new Promise<void>((r) => (started = r));
  let release: () => void = () => {};
  const released = new Promise<void>((r) => (release = r));
  const w = worker(
    env,
    async () => {
      started();
      await released;
      return "done";
    },
    { concurrency: 1 },
  );
  const run = w.run({ handleSignals: true });
  await within(20_000, running, "the handler never ran");
  const b = await submit(env, { payload: new TextEncoder().encode("b") });
  process.kill(process.pid, "SIGTERM");
  await new Promise((r) => setTimeout(r, 300)); // the signal is delivered on the event loop
  release();
  await within(20_000, run, "run() did not return after SIGTERM");
  const sa = await state(env, a);
  const sb = await state(env, b);
  check(sa === TaskState.SUCCEEDED && sb === TaskState.READY, `a ${TaskState[sa]}, b ${TaskState[sb]}; want SUCCEEDED, READY`);
};
