/**
 * Completions share calls (the Rust runtime's completer rule). A finished task hands its
 * Complete to the worker's completer: alone, it is sent at once as a plain Complete, so a lone
 * task is never delayed; while one call is in flight the next ones queue, and when it returns
 * everything that queued goes as one CompleteMany (at most 256 completions and 1 MiB of
 * results per call).
 *
 * Each completion gets the answer its own Complete would have had: LEASE_LOST per task as an
 * ABORTED ConnectError with the ErrorInfo reason, NOT_FOUND likewise. When the broker refuses
 * the batch as a whole (a result over its size limit, a broker without CompleteMany) every
 * completion of it is sent on its own. When the batch meets an unreachable broker, each
 * completion gets that error and its own settle retry (client-spec point 11) sends it again
 * through the completer, so the retries share calls too.
 *
 * lease_next: a batch asks once, for as many tasks as its completions asked for, and hands them
 * out in order, one per asking completion.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ERROR_DOMAIN, REASON_LEASE_LOST, type BrokerClient } from "./client.js";
import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { CompleteOutcome, type CompleteRequestSchema, type LeasedTask } from "./gen/taskbroker/v1/broker_pb.js";
import type { WorkerMetrics } from "./metrics.js";

/** Completions per call at most (the broker accepts up to 1000). */
export const MAX_BATCH = 256;
/** Result bytes per call at most, well under the default 4 MiB message limit. */
export const MAX_BATCH_BYTES = 1024 * 1024;

type CompleteInit = MessageInitShape<typeof CompleteRequestSchema> & { taskId: string; result?: Uint8Array };

/** The answer for one completion: Complete's error (if any), and the tasks leased for its slot (given even when the completion itself lost its lease, so none is dropped). */
export interface Settled {
  error?: unknown;
  next: LeasedTask[];
}

interface Item {
  req: CompleteInit;
  reply: (settled: Settled) => void;
}

export interface CallOptions {
  signal: AbortSignal;
  timeoutMs: number;
}

export class Completer {
  readonly #broker: BrokerClient;
  readonly #metrics: WorkerMetrics;
  readonly #options: CallOptions;
  readonly #queued: Item[] = [];
  #busy = false;

  constructor(broker: BrokerClient, metrics: WorkerMetrics, options: CallOptions) {
    this.#broker = broker;
    this.#metrics = metrics;
    this.#options = options;
  }

  /** Completions waiting behind the call in flight. */
  get pending(): number {
    return this.#queued.length;
  }

  /** Completes one task; resolves with Complete's answer for it. Never rejects. */
  complete(req: CompleteInit): Promise<Settled> {
    return new Promise((reply) => {
      this.#queued.push({ req, reply });
      if (!this.#busy) void this.#drain();
    });
  }

  async #drain(): Promise<void> {
    this.#busy = true;
    try {
      while (this.#queued.length > 0) {
        await this.#send(this.#take());
      }
    } finally {
      this.#busy = false;
    }
  }

  /** The next batch: up to MAX_BATCH completions, stopping once MAX_BATCH_BYTES of results is reached. */
  #take(): Item[] {
    let bytes = 0;
    let n = 0;
    while (n < this.#queued.length && n < MAX_BATCH && bytes < MAX_BATCH_BYTES) {
      bytes += this.#queued[n]!.req.result?.length ?? 0;
      n++;
    }
    return this.#queued.splice(0, n);
  }

  async #send(batch: Item[]): Promise<void> {
    if (batch.length === 1) {
      await this.#alone(batch[0]!);
      return;
    }
    const asking = batch.filter((i) => i.req.leaseNext !== undefined);
    const leaseNext = asking[0]?.req.leaseNext;
    this.#metrics.settleCall("CompleteMany");
    let res;
    try {
      res = await this.#broker.completeMany(
        {
          completions: batch.map((i) => ({ ...i.req, leaseNext: undefined })),
          leaseNext: leaseNext === undefined ? undefined : { ...leaseNext, maxTasks: asking.length },
        },
        this.#options,
      );
    } catch (err) {
      if (transient(err) || this.#options.signal.aborted) {
        for (const i of batch) i.reply({ error: err, next: [] });
      } else {
        // Refused as a whole: each on its own, as Complete.
        await Promise.all(batch.map((i) => this.#alone(i)));
      }
      return;
    }
    if (res.results.length !== batch.length) {
      await Promise.all(batch.map((i) => this.#alone(i)));
      return;
    }
    const next = [...res.nextTasks];
    batch.forEach((item, n) => {
      const mine = item.req.leaseNext !== undefined && next.length > 0 ? [next.shift()!] : [];
      const error = outcomeError(item.req.taskId, res.results[n]!.outcome);
      item.reply(error === undefined ? { next: mine } : { error, next: mine });
    });
  }

  async #alone(item: Item): Promise<void> {
    this.#metrics.settleCall("Complete");
    try {
      const res = await this.#broker.complete(item.req, this.#options);
      item.reply({ next: res.nextTasks });
    } catch (error) {
      item.reply({ error, next: [] });
    }
  }
}

/** The error Complete would have answered with, for one task of CompleteMany; undefined when completed. */
export function outcomeError(taskId: string, outcome: CompleteOutcome): ConnectError | undefined {
  switch (outcome) {
    case CompleteOutcome.COMPLETED:
      return undefined;
    case CompleteOutcome.LEASE_LOST:
      return new ConnectError(`the lease of task ${taskId} is no longer held`, Code.Aborted, undefined, [
        { desc: ErrorInfoSchema, value: { reason: REASON_LEASE_LOST, domain: ERROR_DOMAIN } },
      ]);
    case CompleteOutcome.NOT_FOUND:
      return new ConnectError(`task ${taskId} not found`, Code.NotFound);
    default:
      return new ConnectError(`CompleteMany answered task ${taskId} with outcome ${outcome}`, Code.Internal);
  }
}

/** Errors a settle retries: the broker was unreachable or did not answer in time (or dropped the connection). */
export function transient(err: unknown): boolean {
  return err instanceof ConnectError && (err.code === Code.Unavailable || err.code === Code.DeadlineExceeded || err.code === Code.Canceled);
}
