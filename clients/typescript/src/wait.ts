/**
 * Waiting for tasks to finish (Flow): `wait`, `waitAll` and `submitAndWait` follow the
 * tasks on AdminService.WatchTasks instead of polling.
 *
 * The watch is opened first and its response headers awaited (from then on every matching
 * event arrives on it), then each task is read once with GetTask: an outcome from before the
 * watch is seen by the read, one from after by the stream, so none is missed and a finished
 * task returns at once. When the stream drops (UNAVAILABLE or a clean end: a broker restart, a
 * network blip) the watch is opened again after the last event received (`afterEventId`) and
 * the tasks read again, with a short growing pause, until the timeout.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { submitTasks, taskSpec, type AdminClient, type SubmitOptions, type Taskbroker } from "./client.js";
import { TaskbrokerError, throwIfFailed } from "./errors.js";
import type { Task } from "./gen/taskbroker/v1/admin_pb.js";
import { TaskState } from "./gen/taskbroker/v1/broker_pb.js";
import { TaskEventKind } from "./gen/taskbroker/v1/event_pb.js";

/** How many tasks one `waitAll` follows (WatchTasks' limit). */
export const MAX_WAIT_TASKS = 1000;

const FIRST_PAUSE_MS = 50;
const MAX_PAUSE_MS = 1000;
/** The longest single GetTask inside a wait. */
const READ_TIMEOUT_MS = 10_000;
/** Only the events that can end a task are streamed. */
const FINAL_KINDS = [TaskEventKind.SUCCEEDED, TaskEventKind.DEAD, TaskEventKind.CANCELLED];

export interface WaitOptions {
  /** Give up after this many milliseconds with a WaitTimeoutError (the tasks carry on). Default: no limit. */
  timeoutMs?: number;
  /** Abort the wait; it rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** The wait ran out of time; the tasks carry on. `taskIds` are those not finished yet. */
export class WaitTimeoutError extends TaskbrokerError {
  readonly taskIds: string[];
  constructor(taskIds: string[], waitedMs: number) {
    super(`${taskIds.length} task(s) not finished after ${waitedMs} ms: ${taskIds.slice(0, 5).join(", ")}`);
    this.name = "WaitTimeoutError";
    this.taskIds = taskIds;
  }
}

/** Whether a task in this state is done: SUCCEEDED, DEAD or CANCELLED. */
export function isFinal(state: TaskState): boolean {
  return state === TaskState.SUCCEEDED || state === TaskState.DEAD || state === TaskState.CANCELLED;
}

/**
 * Resolves with the task once it is SUCCEEDED (`state`, `result`); rejects with a
 * TaskFailedError (`taskId`, `state`, `lastError`) when it ends DEAD or CANCELLED, and with
 * WaitTimeoutError after `timeoutMs`.
 *
 *     const task = await wait(tb, id, { timeoutMs: 60_000 });
 */
export async function wait(tb: Taskbroker | AdminClient, taskId: string, options: WaitOptions = {}): Promise<Task> {
  const [task] = await waitAll(tb, [taskId], options);
  return throwIfFailed(task!);
}

/**
 * Submits one task (as `submitTasks`: backpressure is retried) and `wait`s for it (TaskFailedError
 * as `wait`). `spec` is a TaskSpec or its fields by name, with `runAt` / `deadline` as Dates and
 * `delayMs` as `Client.submit` takes them.
 */
export async function submitAndWait(
  tb: Taskbroker,
  spec: SubmitOptions & { queue?: string; payload?: Uint8Array; $typeName?: string },
  options: WaitOptions = {},
): Promise<Task> {
  const { queue, payload, $typeName: _message, ...fields } = spec;
  const task = taskSpec(queue ?? "", payload ?? new Uint8Array(), fields);
  const [result] = await submitTasks(tb.broker, [task], options.signal ? { signal: options.signal } : {});
  return wait(tb, result!.taskId, options);
}

/**
 * Waits for up to MAX_WAIT_TASKS tasks on one stream; the tasks in the order given, whatever
 * their final state (read each one's `state`; no TaskFailedError).
 */
export async function waitAll(
  tb: Taskbroker | AdminClient,
  taskIds: string[],
  options: WaitOptions = {},
): Promise<Task[]> {
  const admin: AdminClient = "admin" in tb ? tb.admin : tb;
  const ids = [...new Set(taskIds)];
  if (ids.length === 0) throw new RangeError("waitAll: no task ids");
  if (ids.length > MAX_WAIT_TASKS) throw new RangeError(`waitAll: ${ids.length} task ids, at most ${MAX_WAIT_TASKS}`);
  const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
  const left = (): number | undefined => (deadline === undefined ? undefined : deadline - Date.now());
  const expired = (): boolean => deadline !== undefined && Date.now() >= deadline;
  const w: Follow = { admin, ids, done: new Map(), after: 0n, left, progressed: false };
  let pause = FIRST_PAUSE_MS;
  for (;;) {
    const pending = ids.filter((id) => !w.done.has(id));
    if (pending.length === 0) return taskIds.map((id) => w.done.get(id)!);
    options.signal?.throwIfAborted();
    if (expired()) throw new WaitTimeoutError(pending, options.timeoutMs!);
    w.progressed = false;
    try {
      await follow(w, pending, options.signal);
    } catch (e) {
      options.signal?.throwIfAborted();
      if (expired()) throw new WaitTimeoutError(ids.filter((id) => !w.done.has(id)), options.timeoutMs!);
      // Only a dropped stream or an unreachable broker is worth another watch (a deadline
      // here is the transport's defaultTimeoutMs, not this wait's).
      const code = ConnectError.from(e).code;
      if (code !== Code.Unavailable && code !== Code.DeadlineExceeded) throw e;
    }
    if (ids.every((id) => w.done.has(id))) continue;
    if (w.progressed) pause = FIRST_PAUSE_MS;
    await sleep(Math.min(pause, Math.max(0, left() ?? pause)), options.signal);
    pause = Math.min(pause * 2, MAX_PAUSE_MS);
  }
}

interface Follow {
  admin: AdminClient;
  ids: string[];
  done: Map<string, Task>;
  after: bigint;
  left: () => number | undefined;
  progressed: boolean;
}

function timeout(w: Follow, cap?: number): { timeoutMs?: number } {
  const l = w.left();
  const ms = l === undefined ? cap : Math.max(1, cap === undefined ? l : Math.min(l, cap));
  // 0: no deadline (a watch with no timeout outlives the transport's default call deadline).
  return { timeoutMs: ms ?? 0 };
}

async function read(w: Follow, id: string, signal: AbortSignal): Promise<void> {
  const resp = await w.admin.getTask({ taskId: id }, { signal, ...timeout(w, READ_TIMEOUT_MS) });
  if (resp.task && isFinal(resp.task.state)) w.done.set(id, resp.task);
}

/** One watch: resolves when every task finished or the stream ended cleanly; rejects with its error. */
async function follow(w: Follow, pending: string[], outer: AbortSignal | undefined): Promise<void> {
  const stop = new AbortController();
  const signal = outer ? AbortSignal.any([stop.signal, outer]) : stop.signal;
  let headersSeen: () => void = () => {};
  const headers = new Promise<void>((resolve) => (headersSeen = resolve));
  const stream = w.admin.watchTasks(
    { taskIds: pending, kinds: FINAL_KINDS, afterEventId: w.after },
    { signal, ...timeout(w), onHeader: () => headersSeen() },
  );
  const it = stream[Symbol.asyncIterator]();
  let next = it.next();
  next.catch(() => {}); // awaited below; this only keeps an early failure from going unhandled
  try {
    // The headers mean the broker accepted the watch: later events will arrive on it.
    await Promise.race([headers, next]);
    for (const id of pending) await read(w, id, signal);
    while (!w.ids.every((id) => w.done.has(id))) {
      const r = await next;
      if (r.done) return;
      w.progressed = true;
      for (const ev of r.value.events) {
        if (ev.eventId > w.after) w.after = ev.eventId;
        if (!w.done.has(ev.taskId) && w.ids.includes(ev.taskId)) await read(w, ev.taskId, signal);
      }
      next = it.next();
      next.catch(() => {});
    }
  } finally {
    stop.abort();
    // Let the call see the abort and release its resources (its deadline timer among them).
    it.next().catch(() => {});
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
