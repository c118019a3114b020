/**
 * The Worker's lease keeping: one Heartbeat call extends every running lease, about every
 * third of the lease duration, and marks lost the ones the broker says are lost (or, when
 * the call fails, the ones that ran out by the local clock); a per-task watch marks a lease
 * lost when it expires by the local clock, whether or not the broker answers.
 */
import { durationFromMs, timestampDate } from "@bufbuild/protobuf/wkt";
import type { BrokerClient } from "./client.js";
import { sleep, type Running } from "./worker_support.js";

/** What the heartbeat loop needs of its worker. */
export interface Heartbeats {
  broker: BrokerClient;
  workerId: string;
  leaseDurationMs: number;
  intervalMs: number;
  /** Ends the loop, and the call in flight. */
  signal: AbortSignal;
  /** The tasks running now (read at each beat). */
  running: () => Iterable<Running>;
  markLost: (entry: Running, why: string) => void;
  onError: (err: unknown, during: string) => void;
}

/** Beats every `intervalMs` until `signal` aborts. */
export async function heartbeatLoop(h: Heartbeats): Promise<void> {
  const stop = h.signal;
  while (!stop.aborted) {
    await sleep(h.intervalMs, stop);
    if (!stop.aborted) {
      await heartbeatOnce(h);
    }
  }
}

async function heartbeatOnce(h: Heartbeats): Promise<void> {
  const stopped = h.signal;
  const entries = [...h.running()].filter((r) => !r.lost && !r.handedBack && r.ctx.abortKind !== "lost");
  const live = entries.map((r) => r.ctx);
  if (live.length === 0) {
    return;
  }
  try {
    const res = await h.broker.heartbeat(
      {
        workerId: h.workerId,
        leases: live.map((ctx) => ({ taskId: ctx.taskId, leaseToken: ctx.task.leaseToken })),
        extendBy: durationFromMs(h.leaseDurationMs),
      },
      { timeoutMs: Math.max(h.intervalMs, 1_000), signal: h.signal },
    );
    const byId = new Map(entries.map((r) => [r.ctx.taskId, r]));
    for (const status of res.leases) {
      const entry = byId.get(status.taskId);
      if (!entry) continue;
      const ctx = entry.ctx;
      if (status.lost) {
        h.markLost(entry, "a heartbeat answered lost");
      } else if (status.cancelRequested) {
        ctx.abort("cancelled");
      }
      if (status.leaseExpiresAt) {
        ctx.extendedTo(timestampDate(status.leaseExpiresAt).getTime());
      }
    }
  } catch (err) {
    if (stopped.aborted) return;
    h.onError(err, "heartbeat");
    // Without a broker to confirm, a lease that ran out by our clock is gone.
    const now = Date.now();
    for (const entry of entries) {
      if (entry.ctx.leaseExpiresAt.getTime() <= now) {
        h.markLost(entry, "the lease expired without a successful heartbeat");
      }
    }
  }
}

/** Marks the task lost when its lease expires by the local clock; returns the canceller. */
export function watchExpiry(entry: Running, markLost: (entry: Running, why: string) => void): () => void {
  let timer: NodeJS.Timeout | undefined;
  const check = () => {
    const left = entry.ctx.leaseExpiresAt.getTime() - Date.now();
    if (left <= 0) {
      const deadline = entry.ctx.task.deadline;
      // A lease that ends at the task's deadline: the deadline aborts the signal.
      if (deadline && timestampDate(deadline).getTime() <= entry.ctx.leaseExpiresAt.getTime()) return;
      markLost(entry, "the lease expired by the local clock");
    } else {
      timer = setTimeout(check, left);
    }
  };
  check();
  return () => clearTimeout(timer);
}
