/**
 * Limit buckets and cooldowns on `Client` as plain objects: a bucket's settings (get, list,
 * update by field mask, delete) and use, and the live cooldowns workers set (list, lift). Times
 * are `Date`s, scopes are names ("CONCURRENCY_KEY", "BUCKET"); the message each came from stays
 * on `proto`. A worker sets a cooldown by throwing a `RetryableError` with `coolDownKeyMs` or
 * `coolDownBucketMs` (errors.ts).
 *
 * Owns no transport (see client.ts).
 */
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { AdminClient } from "./client.js";
import { CooldownScope } from "./gen/taskbroker/v1/broker_pb.js";
import type { CooldownHold, LimitBucket } from "./gen/taskbroker/v1/queue_pb.js";
import { TaskbrokerError } from "./errors.js";

/** A token bucket: `perSecond` tokens a second, up to `burst` (0: max(1, ceil(perSecond))). */
export interface BucketRateLimit {
  perSecond: number;
  burst: number;
}

/** A limit bucket's settings and its use now. */
export interface BucketInfo {
  name: string;
  /** Leases a second to the bucket's tasks together; undefined: no limit. */
  rateLimit: BucketRateLimit | undefined;
  /** Leases the bucket's tasks hold at once; 0: no limit. */
  maxConcurrent: number;
  /** Tokens in the rate limit's bucket now (0 without a rate limit). */
  tokens: number;
  /** Leases the bucket's tasks hold now. */
  leasesHeld: number;
  /** When the settings last changed. */
  updatedAt: Date | undefined;
  /** When a cooldown of the bucket ends; undefined without one. */
  cooldownUntil: Date | undefined;
  proto: LimitBucket;
}

/**
 * The changes `updateBucket` makes (defining the bucket if need be): only the fields given are
 * sent in the update mask. `rateLimit: null` or `maxConcurrent: 0` removes that limit.
 */
export interface BucketUpdate {
  rateLimit?: { perSecond: number; burst?: number } | null;
  maxConcurrent?: number;
}

/** One live cooldown: of a queue's concurrency key, or of a bucket. */
export interface CooldownInfo {
  scope: "CONCURRENCY_KEY" | "BUCKET";
  /** CONCURRENCY_KEY: the queue and the key; "" otherwise. */
  queue: string;
  concurrencyKey: string;
  /** BUCKET: the bucket; "" otherwise. */
  bucket: string;
  /** No task of the key or bucket is leased before then. */
  until: Date | undefined;
  /** The task whose failed attempt set it. */
  taskId: string;
  proto: CooldownHold;
}

/** What `liftCooldown` ends: a queue's concurrency key, or a bucket. */
export type CooldownOf = { queue: string; key: string } | { bucket: string };

function date(t: Timestamp | undefined): Date | undefined {
  return t === undefined ? undefined : timestampDate(t);
}

/** The BucketInfo of a LimitBucket message. */
export function bucketInfo(b: LimitBucket): BucketInfo {
  const rate = b.config?.rateLimit;
  return {
    name: b.name,
    rateLimit: rate === undefined ? undefined : { perSecond: rate.perSecond, burst: rate.burst },
    maxConcurrent: b.config?.maxConcurrent ?? 0,
    tokens: b.use?.tokens ?? 0,
    leasesHeld: b.use?.leasesHeld ?? 0,
    updatedAt: date(b.updateTime),
    cooldownUntil: date(b.cooldownUntil),
    proto: b,
  };
}

function cooldownInfo(c: CooldownHold): CooldownInfo {
  const scope = CooldownScope[c.scope];
  if (scope !== "CONCURRENCY_KEY" && scope !== "BUCKET") throw new TaskbrokerError(`the broker sent an unknown cooldown scope ${c.scope}`);
  return { scope, queue: c.queue, concurrencyKey: c.concurrencyKey, bucket: c.bucket, until: date(c.until), taskId: c.taskId, proto: c };
}

function one(b: LimitBucket | undefined, what: string): BucketInfo {
  if (b === undefined) throw new TaskbrokerError(`${what}: the broker answered without a bucket`);
  return bucketInfo(b);
}

/** The UpdateBucketRequest of `update`: the mask names each field given, in a fixed order. */
export function updateBucketRequest(name: string, update: BucketUpdate) {
  const paths: string[] = [];
  const config: { rateLimit?: { perSecond: number; burst: number }; maxConcurrent?: number } = {};
  if (update.rateLimit !== undefined) {
    paths.push("rate_limit");
    if (update.rateLimit !== null) config.rateLimit = { perSecond: update.rateLimit.perSecond, burst: update.rateLimit.burst ?? 0 };
  }
  if (update.maxConcurrent !== undefined) {
    paths.push("max_concurrent");
    config.maxConcurrent = update.maxConcurrent;
  }
  if (paths.length === 0) throw new RangeError("updateBucket: give rateLimit or maxConcurrent (nothing to change)");
  return { name, config, updateMask: { paths } };
}

export async function getBucket(admin: AdminClient, name: string): Promise<BucketInfo> {
  return one((await admin.getBucket({ name })).bucket, "getBucket");
}

export async function listBuckets(admin: AdminClient): Promise<BucketInfo[]> {
  return (await admin.listBuckets({})).buckets.map(bucketInfo);
}

export async function updateBucket(admin: AdminClient, name: string, update: BucketUpdate): Promise<BucketInfo> {
  return one((await admin.updateBucket(updateBucketRequest(name, update))).bucket, "updateBucket");
}

export async function deleteBucket(admin: AdminClient, name: string): Promise<void> {
  await admin.deleteBucket({ name });
}

export async function listCooldowns(admin: AdminClient, filter: { queue?: string; bucket?: string } = {}): Promise<CooldownInfo[]> {
  return (await admin.listCooldowns({ queue: filter.queue ?? "", bucket: filter.bucket ?? "" })).cooldowns.map(cooldownInfo);
}

export async function liftCooldown(admin: AdminClient, of: CooldownOf): Promise<boolean> {
  const req = "bucket" in of ? { bucket: of.bucket } : { queue: of.queue, concurrencyKey: of.key };
  return (await admin.liftCooldown(req)).lifted;
}
