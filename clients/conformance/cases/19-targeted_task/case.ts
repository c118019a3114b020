/**
 * The conformance case `targeted_task`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import { RoutingEnv, WORKER_ID, check, complete, leaseAs, payloads, utf8 } from "../../../typescript/conformance/routing.js";
import { target } from "../../../typescript/src/index.js";

export default async (env: RoutingEnv): Promise<void> => {
  const elsewhere = `${WORKER_ID}-elsewhere`;
  await env.broker.submit({
    tasks: [
      { queue: env.queue, payload: utf8.encode("a"), target: target({ labels: { gpu: "a100" } }) },
      { queue: env.queue, payload: utf8.encode("b"), target: target({ workerId: elsewhere }) },
    ],
  });
  let got = await leaseAs(env, WORKER_ID);
  check(got.length === 0, `a worker without labels leased ${payloads(got)}`);
  const carrying = { gpu: "a100", region: "eu" };
  got = await leaseAs(env, WORKER_ID, carrying);
  check(payloads(got) === '["a"]', `the labelled worker leased ${payloads(got)}, want ["a"]`);
  await complete(env, got[0]!);
  got = await leaseAs(env, WORKER_ID, carrying);
  check(got.length === 0, `the labelled worker leased ${payloads(got)}, a task targeted at another worker`);
  got = await leaseAs(env, elsewhere);
  check(payloads(got) === '["b"]', `${elsewhere} leased ${payloads(got)}, want ["b"]`);
  await complete(env, got[0]!);
};
