/**
 * The conformance case `deadline_cancels`, for the TypeScript client: README.md beside this file
 * says what it does and expects.
 */
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { SpecEnv, check, submit, within, worker } from "../../../typescript/conformance/spec.js";

export default async (env: SpecEnv): Promise<void> => {
  await submit(env, { deadline: timestampFromMs(Date.now() + 2_000) });
  let resolveKind: (k: string | undefined) => void = () => {};
  const kind = new Promise<string | undefined>((r) => (resolveKind = r));
  const w = worker(env, async (ctx) => {
    await new Promise<void>((r) => {
      const t = setTimeout(r, 20_000);
      ctx.signal.addEventListener("abort", () => (clearTimeout(t), r()), { once: true });
    });
    resolveKind(ctx.abortKind);
    throw new Error("cancelled");
  });
  const run = w.run();
  try {
    const k = await within(25_000, kind, "the handler never ran");
    check(k === "deadline", `abort kind ${k}, want deadline`);
  } finally {
    await w.close();
    await run;
  }
};
