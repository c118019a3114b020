/**
 * The operator calls of `Client` on tasks (get, list, cancel, requeue, explain) as plain objects: states,
 * gate kinds and lease paths by name ("SUCCEEDED", "RUN_AT_IN_FUTURE"), times as `Date`s. The
 * message each came from stays on `proto`.
 *
 * Owns no transport (see client.ts).
 */
import { timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { AdminClient } from "./client.js";
import { TaskState } from "./gen/taskbroker/v1/broker_pb.js";
import type { Task } from "./gen/taskbroker/v1/admin_pb.js";
import { CancelReason } from "./gen/taskbroker/v1/event_pb.js";
import { GateKind, LeasePath, type ExplainTaskResponse } from "./gen/taskbroker/v1/queue_pb.js";
import { TaskbrokerError } from "./errors.js";

/** A task's state by name. */
export type TaskStateName = "SCHEDULED" | "READY" | "LEASED" | "SUCCEEDED" | "DEAD" | "CANCELLED" | "BLOCKED";

const STATE_NAMES: readonly TaskStateName[] = ["SCHEDULED", "READY", "LEASED", "SUCCEEDED", "DEAD", "CANCELLED", "BLOCKED"];

/** A task as the broker has it; times not set are undefined. */
export interface TaskInfo {
  id: string;
  queue: string;
  key: string;
  /** The limit bucket it counts against, as submitted ("": its queue's bucket, if any). */
  bucket: string;
  state: TaskStateName;
  attempt: number;
  maxAttempts: number;
  priority: number;
  payload: Uint8Array;
  result: Uint8Array;
  lastError: string;
  metadata: Record<string, string>;
  runAt: Date | undefined;
  deadline: Date | undefined;
  createdAt: Date | undefined;
  updatedAt: Date | undefined;
  finishedAt: Date | undefined;
  leasedBy: string;
  leaseExpiresAt: Date | undefined;
  cancelRequested: boolean;
  /** "OPERATOR" or "DEPENDENCY_FAILED" for a CANCELLED task, "" otherwise. */
  cancelReason: string;
  /** The message as it came, for the fields not copied here. */
  proto: Task;
}

/** One reason a waiting task is not leased now; kind "NONE": nothing holds it. */
export interface TaskGate {
  kind: string;
  detail: string;
  until: Date | undefined;
  holderTaskIds: string[];
  ahead: number;
  /** BUCKET_CONCURRENCY_FULL, BUCKET_RATE_LIMITED, COOLDOWN of a bucket: the bucket. */
  bucket: string;
  /** COOLDOWN of a concurrency key: the key. */
  concurrencyKey: string;
}

/**
 * What holds a task (ExplainTask). `gates` is empty when the task is not waiting (leased or
 * finished); `leasePath` is "PLAIN", "ROUTED" or "GATED" for a waiting task, "" otherwise.
 */
export interface TaskExplanation {
  taskId: string;
  state: TaskStateName;
  gates: TaskGate[];
  leasePath: string;
  proto: ExplainTaskResponse;
}

/** Which tasks `listTasks` yields; empty means all of them. */
export interface TaskFilter {
  queue?: string;
  states?: readonly TaskStateName[];
  key?: string;
  workerId?: string;
  fanoutGroup?: string;
  scheduleId?: string;
  createdAfter?: Date;
  createdBefore?: Date;
  /** Only tasks whose target names this worker. */
  targetWorker?: string;
  /** Only tasks whose target labels include every pair (at most 32). */
  targetLabels?: Record<string, string>;
  /** Only tasks whose metadata has this key; with `metadataValue`, mapped to that value (a value without a key is INVALID_ARGUMENT). */
  metadataKey?: string;
  metadataValue?: string;
  /** Tasks per call (the broker's default when unset); every page is read. */
  pageSize?: number;
}

function stateName(s: TaskState): TaskStateName {
  const name = TaskState[s] as TaskStateName | undefined;
  if (name === undefined || !STATE_NAMES.includes(name)) throw new TaskbrokerError(`the broker sent an unknown task state ${s}`);
  return name;
}

function date(t: Timestamp | undefined): Date | undefined {
  return t === undefined ? undefined : timestampDate(t);
}

/** The TaskInfo of a task message. */
export function taskInfo(t: Task): TaskInfo {
  return {
    id: t.id,
    queue: t.queue,
    key: t.key,
    bucket: t.bucket,
    state: stateName(t.state),
    attempt: t.attempt,
    maxAttempts: t.maxAttempts,
    priority: t.priority,
    payload: t.payload,
    result: t.result,
    lastError: t.lastError,
    metadata: { ...t.metadata },
    runAt: date(t.runAt),
    deadline: date(t.deadline),
    createdAt: date(t.createdAt),
    updatedAt: date(t.updatedAt),
    finishedAt: date(t.finishedAt),
    leasedBy: t.leasedBy,
    leaseExpiresAt: date(t.leaseExpiresAt),
    cancelRequested: t.cancelRequested,
    cancelReason: t.cancelReason === CancelReason.UNSPECIFIED ? "" : (CancelReason[t.cancelReason] ?? String(t.cancelReason)),
    proto: t,
  };
}

function explanation(r: ExplainTaskResponse): TaskExplanation {
  return {
    taskId: r.taskId,
    state: stateName(r.state),
    gates: r.gates.map((g) => ({
      kind: GateKind[g.kind] ?? String(g.kind),
      detail: g.detail,
      until: date(g.until),
      holderTaskIds: [...g.holderTaskIds],
      ahead: Number(g.ahead),
      bucket: g.bucket,
      concurrencyKey: g.concurrencyKey,
    })),
    leasePath: r.leasePath === LeasePath.UNSPECIFIED ? "" : (LeasePath[r.leasePath] ?? String(r.leasePath)),
    proto: r,
  };
}

function one(t: Task | undefined, what: string): TaskInfo {
  if (t === undefined) throw new TaskbrokerError(`${what}: the broker answered without a task`);
  return taskInfo(t);
}

export async function getTask(admin: AdminClient, taskId: string): Promise<TaskInfo> {
  return one((await admin.getTask({ taskId })).task, "getTask");
}

export async function* listTasks(admin: AdminClient, filter: TaskFilter = {}): AsyncGenerator<TaskInfo, void, undefined> {
  const states = (filter.states ?? []).map((s) => {
    const v = STATE_NAMES.includes(s) ? TaskState[s] : undefined;
    if (v === undefined) throw new RangeError(`listTasks: filter.states: unknown task state ${String(s)} (one of ${STATE_NAMES.join(", ")})`);
    return v;
  });
  let pageToken = "";
  for (;;) {
    const r = await admin.listTasks({
      queue: filter.queue ?? "",
      states,
      key: filter.key ?? "",
      workerId: filter.workerId ?? "",
      fanoutGroup: filter.fanoutGroup ?? "",
      scheduleId: filter.scheduleId ?? "",
      targetWorkerId: filter.targetWorker ?? "",
      targetLabels: filter.targetLabels ?? {},
      metadataKey: filter.metadataKey ?? "",
      metadataValue: filter.metadataValue ?? "",
      pageSize: filter.pageSize ?? 0,
      pageToken,
      ...(filter.createdAfter ? { createdAfter: timestampFromDate(filter.createdAfter) } : {}),
      ...(filter.createdBefore ? { createdBefore: timestampFromDate(filter.createdBefore) } : {}),
    });
    for (const t of r.tasks) yield taskInfo(t);
    if (r.nextPageToken === "") return;
    pageToken = r.nextPageToken;
  }
}

export async function cancelTask(admin: AdminClient, taskId: string): Promise<TaskInfo> {
  return one((await admin.cancelTask({ taskId })).task, "cancelTask");
}

export async function requeueTask(admin: AdminClient, taskId: string): Promise<TaskInfo> {
  return one((await admin.requeueTask({ taskId })).task, "requeueTask");
}

export async function explainTask(admin: AdminClient, taskId: string): Promise<TaskExplanation> {
  return explanation(await admin.explainTask({ taskId }));
}
