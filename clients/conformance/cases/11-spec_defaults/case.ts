/**
 * The conformance case `spec_defaults`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { SpecEnv, check, worker } from "../../../typescript/conformance/spec.js";
import { backoffCeilingMs, backoffMs, stopsWorker } from "../../../typescript/src/index.js";

export default async (env: SpecEnv): Promise<void> => {
  const s = worker(env, async () => {}, { pollWaitMs: undefined, onError: undefined }).settings;
  const got = [s.concurrency, s.pollWaitMs, s.leaseDurationMs, s.heartbeatIntervalMs, s.stopTimeoutMs];
  check(got.join() === "4,10000,30000,10000,30000", `defaults ${got}, want 4,10000,30000,10000,30000`);
  check(backoffCeilingMs(0) === 200 && backoffCeilingMs(10) === 10_000, `ceilings ${backoffCeilingMs(0)} ${backoffCeilingMs(10)}`);
  const draws = Array.from({ length: 50 }, () => backoffMs(3));
  check(draws.every((d) => d >= 160 && d <= 1600), `backoffMs(3) outside [160, 1600]: ${Math.min(...draws)}..${Math.max(...draws)}`);
  check(new Set(draws).size > 1, "backoffMs(3) has no jitter");
  for (const c of [Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument, Code.Unimplemented]) {
    check(stopsWorker(new ConnectError("x", c)), `stopsWorker(${Code[c]}) false`);
  }
  check(!stopsWorker(new ConnectError("x", Code.Unavailable)), "stopsWorker(Unavailable) true");
};
