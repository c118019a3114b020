/** Flow in the TypeScript client: `wait` follows WatchTasks, against a fake
 * AdminService on a raw HTTP/2 gRPC server (so, like the broker, it sends a watch's headers
 * before any event), which drops a stream to show the reconnect with afterEventId. */
import assert from "node:assert/strict";
import { createServer, type Http2Server, type ServerHttp2Session, type ServerHttp2Stream } from "node:http2";
import type { AddressInfo } from "node:net";
import { afterEach, beforeEach, test } from "node:test";
import { create, fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  connect,
  GetTaskRequestSchema,
  GetTaskResponseSchema,
  TaskEventKind,
  TaskState,
  TaskbrokerError,
  TaskFailedError,
  WaitTimeoutError,
  WatchTasksRequestSchema,
  WatchTasksResponseSchema,
  wait,
  waitAll,
  type WatchTasksRequest,
} from "../src/index.js";

type Script = (fake: FakeAdmin, req: WatchTasksRequest, stream: ServerHttp2Stream) => void;

class FakeAdmin {
  readonly states = new Map<string, TaskState>([
    ["t1", TaskState.LEASED],
    ["t2", TaskState.READY],
    ["done", TaskState.SUCCEEDED],
  ]);
  readonly watches: WatchTasksRequest[] = [];
  scripts: Script[] = [];
  #server: Http2Server | undefined;
  readonly #sessions = new Set<ServerHttp2Session>();

  async start(): Promise<string> {
    this.#server = createServer();
    this.#server.on("session", (s: ServerHttp2Session) => {
      this.#sessions.add(s);
      s.on("close", () => this.#sessions.delete(s));
    });
    this.#server.on("stream", (stream, headers) => {
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => this.#handle(String(headers[":path"]), Buffer.concat(chunks).subarray(5), stream));
    });
    await new Promise<void>((resolve) => this.#server!.listen(0, "127.0.0.1", resolve));
    return `127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#server!.close(() => resolve()));
    for (const s of this.#sessions) s.destroy();
    await closed;
  }

  #handle(path: string, body: Buffer, stream: ServerHttp2Stream): void {
    if (path.endsWith("/GetTask")) {
      const req = fromBinary(GetTaskRequestSchema, body);
      const state = this.states.get(req.taskId);
      if (state === undefined) return fail(stream, Code.NotFound, "task_id: no such task");
      const failed = state === TaskState.DEAD || state === TaskState.CANCELLED;
      const resp = create(GetTaskResponseSchema, {
        task: failed
          ? { id: req.taskId, state, lastError: `boom-${req.taskId}` }
          : { id: req.taskId, state, result: new TextEncoder().encode(`r-${req.taskId}`) },
      });
      return reply(stream, GetTaskResponseSchema, [resp]);
    }
    if (path.endsWith("/WatchTasks")) {
      const req = fromBinary(WatchTasksRequestSchema, body);
      this.watches.push(req);
      open(stream);
      const script = this.scripts.shift();
      // Without a script: send nothing until the client goes away.
      if (script) script(this, req, stream);
      return;
    }
    fail(stream, Code.Unimplemented, path);
  }
}

function frame<D extends DescMessage>(schema: D, msg: MessageShape<D>): Buffer {
  const bytes = toBinary(schema, msg);
  const out = Buffer.alloc(5 + bytes.length);
  out.writeUInt32BE(bytes.length, 1);
  out.set(bytes, 5);
  return out;
}

/** Sends the response headers at once, as the broker does when it accepts a watch. */
function open(stream: ServerHttp2Stream): void {
  stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
}

function end(stream: ServerHttp2Stream, code: Code | 0, message = ""): void {
  stream.once("wantTrailers", () =>
    stream.sendTrailers({ "grpc-status": String(code), "grpc-message": encodeURIComponent(message) }),
  );
  stream.end();
}

function reply<D extends DescMessage>(stream: ServerHttp2Stream, schema: D, msgs: MessageShape<D>[]): void {
  open(stream);
  for (const m of msgs) stream.write(frame(schema, m));
  end(stream, 0);
}

function fail(stream: ServerHttp2Stream, code: Code, message: string): void {
  stream.respond(
    { ":status": 200, "content-type": "application/grpc", "grpc-status": String(code), "grpc-message": message },
    { endStream: true },
  );
}

function succeeded(eventId: bigint, taskId: string) {
  return create(WatchTasksResponseSchema, {
    events: [{ eventId, taskId, kind: TaskEventKind.SUCCEEDED, state: TaskState.SUCCEEDED }],
  });
}

let fake: FakeAdmin;
let addr: string;

beforeEach(async () => {
  fake = new FakeAdmin();
  addr = await fake.start();
});

afterEach(async () => {
  await fake.close();
});

test("a finished task returns at once, after the watch opened", async () => {
  const task = await wait(connect(addr), "done", { timeoutMs: 30_000 });
  assert.equal(task.state, TaskState.SUCCEEDED);
  assert.equal(new TextDecoder().decode(task.result), "r-done");
  assert.deepEqual(
    fake.watches.map((w) => [...w.taskIds]),
    [["done"]],
  );
});

test("wait resumes after the last event when the stream drops", async () => {
  fake.scripts = [
    (f, _req, s) => {
      f.states.set("t1", TaskState.SUCCEEDED);
      s.write(frame(WatchTasksResponseSchema, succeeded(7n, "t1")));
      end(s, Code.Unavailable, "the broker is restarting");
    },
    (f, _req, s) => {
      f.states.set("t2", TaskState.SUCCEEDED);
      s.write(frame(WatchTasksResponseSchema, succeeded(9n, "t2")));
    },
  ];
  const tasks = await waitAll(connect(addr).admin, ["t1", "t2"], { timeoutMs: 30_000 });
  assert.deepEqual(
    tasks.map((t) => t.id),
    ["t1", "t2"],
  );
  assert.ok(tasks.every((t) => t.state === TaskState.SUCCEEDED));
  const [first, second] = fake.watches;
  assert.deepEqual([...first!.taskIds], ["t1", "t2"]);
  assert.equal(first!.afterEventId, 0n);
  assert.ok(first!.kinds.includes(TaskEventKind.SUCCEEDED));
  // Resumed after event 7, for the task still running.
  assert.deepEqual([...second!.taskIds], ["t2"]);
  assert.equal(second!.afterEventId, 7n);
});

test("waiting for a task that ended DEAD or CANCELLED rejects with TaskFailedError", async () => {
  fake.states.set("dead", TaskState.DEAD);
  fake.states.set("gone", TaskState.CANCELLED);
  const tb = connect(addr);
  for (const [id, state, name] of [["dead", TaskState.DEAD, "DEAD"], ["gone", TaskState.CANCELLED, "CANCELLED"]] as const) {
    const check = (e: unknown) => {
      assert.ok(e instanceof TaskFailedError && e instanceof TaskbrokerError, `got ${String(e)}`);
      assert.deepEqual([e.taskId, e.state, e.lastError, e.message], [id, state, `boom-${id}`, `task ${id} ended ${name}: boom-${id}`]);
      return true;
    };
    await assert.rejects(wait(tb, id, { timeoutMs: 30_000 }), check);
    // The typed result getter says the same.
    await assert.rejects(tb.getResult(id), check);
    // waitAll returns the tasks whatever their state.
    const [task] = await waitAll(tb, [id], { timeoutMs: 30_000 });
    assert.equal(task!.state, state);
  }
});

test("wait gives up at the timeout with WaitTimeoutError", async () => {
  await assert.rejects(wait(connect(addr), "t1", { timeoutMs: 300 }), (e: unknown) => {
    assert.ok(e instanceof WaitTimeoutError);
    assert.deepEqual(e.taskIds, ["t1"]);
    return true;
  });
});

test("wait rejects with what is not a dropped stream", async () => {
  await assert.rejects(wait(connect(addr), "nope", { timeoutMs: 5_000 }), (e: unknown) => {
    assert.equal(ConnectError.from(e).code, Code.NotFound);
    return true;
  });
});

test("wait stops when its signal aborts", async () => {
  const abort = new AbortController();
  const waiting = wait(connect(addr), "t1", { signal: abort.signal });
  setTimeout(() => abort.abort(new Error("enough")), 100);
  await assert.rejects(waiting, /enough/);
});
