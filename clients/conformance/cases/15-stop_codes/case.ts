/**
 * The conformance case `stop_codes`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import { Code } from "@connectrpc/connect";
import { SpecEnv, check, within, worker } from "../../../typescript/conformance/spec.js";
import { connect, optionsFromEnv, Worker, WorkerStoppedError } from "../../../typescript/src/index.js";

export default async (env: SpecEnv): Promise<void> => {
  const expectStop = async (w: Worker, want: Code, what: string) => {
    let err: unknown;
    try {
      await within(20_000, w.run(), "the worker kept running");
    } catch (e) {
      err = e;
    } finally {
      await w.close();
    }
    check(err instanceof WorkerStoppedError && err.code === want, `${what}: run() ended with ${String(err)}, want WorkerStoppedError ${Code[want]}`);
  };
  await expectStop(worker({ ...env, queue: "has space" }, async () => {}), Code.InvalidArgument, "bad queue");
  if (process.env["TASKBROKER_TOKEN"]) {
    const bad = connect(process.env["TASKBROKER_ADDR"]!, { ...optionsFromEnv(), token: "wrong-token-0123456789" });
    await expectStop(worker({ ...env, broker: bad.broker }, async () => {}), Code.Unauthenticated, "wrong token");
  }
};
