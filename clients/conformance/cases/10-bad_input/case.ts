/**
 * The conformance case `bad_input`, for the TypeScript client: README.md beside this file says
 * what it does and expects.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { Env, check } from "../../../typescript/conformance/contract.js";

export default async (env: Env): Promise<void> => {
  let err: unknown;
  try {
    await env.broker.submit({ tasks: [{ queue: "has space" }] });
  } catch (e) {
    err = e;
  }
  check(err !== undefined, "Submit with queue \"has space\" succeeded");
  const ce = ConnectError.from(err);
  check(ce.code === Code.InvalidArgument, `status ${Code[ce.code]} (${ce.rawMessage}), want InvalidArgument`);
  check(ce.rawMessage.includes("tasks[0].queue"), `message "${ce.rawMessage}" does not name tasks[0].queue`);
};
