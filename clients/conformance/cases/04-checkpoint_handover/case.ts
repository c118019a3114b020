/**
 * The conformance case `checkpoint_handover`, for the TypeScript client: README.md beside this
 * file says what it does and expects.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Env, bytes, check, leaseOne, submitOne, text } from "../../../typescript/conformance/contract.js";

export default async (env: Env): Promise<void> => {
  const taskId = await submitOne(env, { retry: { initialBackoff: durationFromMs(0) } });
  const first = await leaseOne(env, 1_000);
  await env.broker.checkpoint({ taskId, leaseToken: first.leaseToken, checkpoint: bytes("step-3") });
  const second = await leaseOne(env, 30_000, 15_000);
  check(second.taskId === taskId, `second lease got ${second.taskId}, want ${taskId}`);
  check(second.attempt === 2, `attempt ${second.attempt}, want 2`);
  check(second.hasCheckpoint, "has_checkpoint false");
  check(text.decode(second.checkpoint) === "step-3", `checkpoint "${text.decode(second.checkpoint)}", want "step-3"`);
  check(
    second.fencingToken > first.fencingToken,
    `fencing_token ${second.fencingToken} not greater than ${first.fencingToken}`,
  );
  await env.broker.complete({ taskId, leaseToken: second.leaseToken });
};
