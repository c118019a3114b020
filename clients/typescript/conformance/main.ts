/**
 * The client conformance scenario (clients/conformance/SCENARIO.md) in TypeScript.
 *
 * Talks to the broker at $TASKBROKER_ADDR through the generated Connect clients only, prints
 * `PASS <case>` / `FAIL <case>: <reason>` per case and `N passed, M failed` last; exits 1
 * when any case failed.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { connect, optionsFromEnv } from "../src/index.js";
import { LANG, Mismatch, type Case } from "./contract.js";

/**
 * The cases of clients/conformance/cases.txt in its order, each the default export of its
 * folder's case.ts (cases/NN-<name>/case.ts, NN its line). This file runs from
 * dist-conformance/typescript/conformance/ (tsconfig.conformance.json), the cases from
 * dist-conformance/conformance/cases/.
 */
async function loadCases(): Promise<[string, Case][]> {
  const list = new URL("../../../../conformance/cases.txt", import.meta.url);
  const names = readFileSync(list, "utf8").split("\n").filter((l) => l.trim() !== "");
  const cases: [string, Case][] = [];
  for (const [i, name] of names.entries()) {
    const dir = `${String(i + 1).padStart(2, "0")}-${name}`;
    const mod = (await import(new URL(`../../conformance/cases/${dir}/case.js`, import.meta.url).href)) as { default: Case };
    cases.push([name, mod.default]);
  }
  return cases;
}

function reasonOf(err: unknown): string {
  if (err instanceof Mismatch) return err.message;
  if (err instanceof ConnectError) return `rpc error ${Code[err.code]}: ${err.rawMessage}`;
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

async function main(): Promise<number> {
  const addr = process.env["TASKBROKER_ADDR"];
  if (!addr) {
    console.error("TASKBROKER_ADDR (host:port) is not set");
    return 2;
  }
  // Every call gets a deadline, so a broker that hangs fails a case instead of the run.
  // TLS, mTLS and the token come from TASKBROKER_CA / _CLIENT_CERT / _CLIENT_KEY / _TOKEN.
  const client = connect(addr, optionsFromEnv({ defaultTimeoutMs: 10_000 }));
  const { broker, admin, schedules } = client;
  let passed = 0;
  let failed = 0;
  for (const [name, run] of await loadCases()) {
    const queue = `conf.${LANG}.${name}.${randomBytes(3).toString("hex")}`;
    try {
      await withTimeout(run({ client, broker, admin, schedules, queue }), 40_000);
      console.log(`PASS ${name}`);
      passed++;
    } catch (err) {
      console.log(`FAIL ${name}: ${reasonOf(err).replace(/\s+/g, " ")}`);
      failed++;
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  return failed > 0 ? 1 : 0;
}

async function withTimeout<T>(p: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Mismatch(`case did not finish within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

process.exitCode = await main();
