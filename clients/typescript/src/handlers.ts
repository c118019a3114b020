/**
 * What a worker runs for each queue: typed handlers (the payload decoded by a Serializer, the
 * result encoded by it), raw handlers (bytes in, bytes out) and the middleware around them.
 * Pure: no I/O; the worker calls `route.run(ctx)` and `route.encode(value)`.
 */
import type { TaskContext } from "./context.js";
import { toBytes, type BytesLike } from "./context.js";
import { PermanentError } from "./errors.js";
import { messageOf, type Serializer } from "./serializer.js";
import type { QueuePolicy } from "./policy.js";

/** Does the work of one task on raw bytes: resolve (optionally with a result) to complete it; throw to fail it. */
export type Handler = (ctx: TaskContext) => Promise<BytesLike | void>;

/**
 * Does the work of one task on its decoded payload; its return value, encoded by the
 * serializer, is the task's result. Throw to fail the attempt (PermanentError: no retry).
 */
export type TypedHandler<Data = unknown, Result = unknown> = (data: Data, ctx: TaskContext) => Result | Promise<Result>;

/**
 * Runs around every handler call, the first registered outermost: `next()` runs the rest of the
 * chain and the handler, resolving with the handler's result or rejecting with its error.
 * Return (or throw) to keep or replace the outcome.
 *
 *     const timing: Middleware = async (ctx, next) => {
 *       const t0 = performance.now();
 *       try { return await next(); } finally { log(ctx.queue, performance.now() - t0); }
 *     };
 */
export type Middleware = (ctx: TaskContext, next: () => Promise<unknown>) => Promise<unknown>;

export interface HandlerOptions<Data = unknown> {
  /** The payload's type name in errors ("payload is not a valid Email: ..."). */
  type?: string;
  /**
   * Checks (and may convert) the decoded payload, e.g. a zod schema's `parse`. A throw fails
   * the attempt at once, as non-retryable.
   */
  validate?: (value: unknown) => Data;
  /** This handler's serializer; default the worker's. */
  serializer?: Serializer;
  /** The queue's policy: retry defaults, non-retryable errors, concurrency (policy.ts). */
  policy?: QueuePolicy;
}

const TYPED = Symbol("taskbroker.handler");

/** A typed handler with its options, as `handler()` makes it. */
export interface HandlerDefinition<Data = unknown, Result = unknown> extends HandlerOptions<Data> {
  readonly [TYPED]: true;
  readonly fn: TypedHandler<Data, Result>;
}

/**
 * A typed handler with options, for the `handlers` map of a Worker:
 *
 *     handlers: { emails: handler<Email, Sent>(sendEmail, { type: "Email", validate: Email.parse }) }
 */
export function handler<Data = unknown, Result = unknown>(
  fn: TypedHandler<Data, Result>,
  options: HandlerOptions<Data> = {},
): HandlerDefinition<Data, Result> {
  if (typeof fn !== "function") throw new TypeError("handler: fn must be a function");
  return { ...options, fn, [TYPED]: true };
}

/** A typed handler of any types, as the registry holds it. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyHandler = TypedHandler<any, any> | HandlerDefinition<any, any>;

/** How the worker runs the tasks of one queue. */
export interface Route {
  /** Decodes the payload (typed) and calls the handler; resolves with its result. */
  run(ctx: TaskContext): Promise<unknown>;
  /** The result's bytes, or the error that fails the attempt when it cannot be stored. */
  encode(value: unknown): Uint8Array | Error;
}

/** The route of a raw handler: results must be bytes, a string or nothing. */
export function rawRoute(fn: Handler): Route {
  return { run: (ctx) => fn(ctx), encode: resultBytes };
}

/** The route of a typed handler (a function or a `handler()` definition) on `queue`. */
export function typedRoute(queue: string, def: AnyHandler, serializer: Serializer): Route {
  const d: HandlerDefinition = typeof def === "function" ? handler(def as TypedHandler) : def;
  if (typeof d.fn !== "function") throw new TypeError(`handler for queue ${queue}: not a function or a handler() definition`);
  const ser = d.serializer ?? serializer;
  const what = d.type === undefined ? `payload is not valid ${ser.name}` : `payload is not a valid ${d.type}`;
  return {
    run: async (ctx) => {
      let data: unknown;
      try {
        data = ser.decode(ctx.payload);
        if (d.validate) data = d.validate(data);
      } catch (err) {
        throw new PermanentError(`queue ${queue}: ${what}: ${messageOf(err)}`, { cause: err });
      }
      return d.fn(data, ctx);
    },
    encode: (value) => {
      try {
        return ser.encode(value);
      } catch (err) {
        return new TypeError(`queue ${queue}: result cannot be encoded as ${ser.name}: ${messageOf(err)}`);
      }
    },
  };
}

/** True for a `handler()` definition or a function. */
export function isHandler(v: unknown): v is AnyHandler {
  return typeof v === "function" || (typeof v === "object" && v !== null && TYPED in v);
}

/** `run` wrapped in the middleware, the first outermost. */
export function withMiddleware(middleware: readonly Middleware[], run: (ctx: TaskContext) => Promise<unknown>) {
  return (ctx: TaskContext): Promise<unknown> => {
    const at = (i: number): Promise<unknown> => {
      const mw = middleware[i];
      if (!mw) return run(ctx);
      let called = false;
      return mw(ctx, () => {
        if (called) return Promise.reject(new Error("middleware called next() twice"));
        called = true;
        return at(i + 1);
      });
    };
    return at(0);
  };
}

/**
 * The bytes of a raw handler's result, or the error that fails the task when the handler
 * returned something else (a programming error, reported at once, not left to the lease).
 */
export function resultBytes(result: unknown): Uint8Array | Error {
  if (result === undefined || result === null) return new Uint8Array();
  if (typeof result === "string" || result instanceof Uint8Array) return toBytes(result);
  return new Error(`handler returned ${typeName(result)}, not a Uint8Array, string or undefined`);
}

function typeName(v: unknown): string {
  if (Array.isArray(v)) return "an array";
  if (typeof v === "object") {
    const name = (v as object).constructor?.name;
    return name && name !== "Object" ? `a ${name}` : "a plain object";
  }
  return `a ${typeof v}`;
}
