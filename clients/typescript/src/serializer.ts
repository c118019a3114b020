/**
 * Typed payloads and results: a Serializer turns values into task bytes and back. JSON (UTF-8)
 * is the default; pass another to `Client` or `Worker` (MessagePack, protobuf, ...). Pure: no I/O.
 */
import { TaskbrokerError } from "./errors.js";

/** Turns values into the bytes of a payload or result and back. */
export interface Serializer {
  /** Names the encoding in errors ("JSON"). */
  readonly name: string;
  /** The bytes of `value`; throws when the value cannot be encoded. */
  encode(value: unknown): Uint8Array;
  /** The value of `bytes`; throws when they do not decode. The caller asserts the type. */
  decode(bytes: Uint8Array): unknown;
}

const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** JSON as UTF-8: the default serializer. `undefined` encodes as no bytes, and no bytes decode as `undefined`. */
export const json: Serializer = Object.freeze({
  name: "JSON",
  encode(value: unknown): Uint8Array {
    if (value === undefined) return new Uint8Array();
    const text = JSON.stringify(value) as string | undefined;
    if (text === undefined) throw new TypeError(`a ${typeof value} is not JSON`);
    return utf8.encode(text);
  },
  decode(bytes: Uint8Array): unknown {
    if (bytes.length === 0) return undefined;
    return JSON.parse(strictUtf8.decode(bytes));
  },
});

/** A payload or result that its serializer could not decode or encode. */
export class SerializationError extends TaskbrokerError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, options);
    this.name = "SerializationError";
  }
}

/** The bytes to send for `data`: raw bytes as they are, anything else through the serializer. */
export function payloadBytes(serializer: Serializer, data: unknown): Uint8Array {
  if (data instanceof Uint8Array) return data;
  try {
    return serializer.encode(data);
  } catch (err) {
    throw new SerializationError(`payload cannot be encoded as ${serializer.name}: ${messageOf(err)}`, { cause: err });
  }
}

/** Decodes a task's result bytes (as from GetTask or wait) with the serializer; the caller names the type. */
export function decodeResult<Result = unknown>(bytes: Uint8Array, serializer: Serializer = json): Result {
  try {
    return serializer.decode(bytes) as Result;
  } catch (err) {
    throw new SerializationError(`result is not valid ${serializer.name}: ${messageOf(err)}`, { cause: err });
  }
}

/** The message of an error in one line. */
export function messageOf(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).replace(/\s+/g, " ").trim();
}
