"""Limit buckets and cooldowns as ``Client`` and ``AsyncClient`` answer them: a bucket's
settings and use (``get_bucket``, ``list_buckets``, ``update_bucket``, ``delete_bucket``) and
the live cooldowns workers set (``list_cooldowns``, ``lift_cooldown``), times as aware
``datetime``s. The message each came from stays on ``.proto``.

A worker sets a cooldown by failing with ``RetryableError(..., cool_down_key=90)`` (or
``cool_down_bucket=``); see docs/semantics.md, "Limit buckets and cooldowns".

The calls are mixins over the client's ``admin`` stub, so client.py and aio.py hold one line
each for them.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import TYPE_CHECKING

from google.protobuf import field_mask_pb2

from taskbroker import spec
from taskbroker.spec import Duration, seconds
from taskbroker.tasks import _name, _time
from taskbroker.v1 import admin_pb2_grpc, broker_pb2, queue_pb2


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A limit bucket (LimitBucket): its settings, its use now and its cooldown."""

    name: str
    #: Leases per second granted to its tasks together; None: no rate limit.
    rate_limit: float | None
    #: The rate limit's burst (0: one second's worth).
    burst: int
    #: Leases its tasks hold at once; 0: no limit.
    max_concurrent: int
    #: Tokens in the rate limit's bucket now (0 without a rate limit).
    tokens: float
    #: Leases its tasks hold now.
    leases_held: int
    updated_at: datetime.datetime | None
    #: When a cooldown of the bucket ends; None when it has none.
    cooldown_until: datetime.datetime | None
    proto: queue_pb2.LimitBucket = dataclasses.field(repr=False, compare=False)

    @classmethod
    def of(cls, b: queue_pb2.LimitBucket) -> Bucket:
        rate = b.config.rate_limit if b.config.HasField("rate_limit") else None
        return cls(
            name=b.name,
            rate_limit=rate.per_second if rate is not None else None,
            burst=rate.burst if rate is not None else 0,
            max_concurrent=b.config.max_concurrent,
            tokens=b.use.tokens,
            leases_held=b.use.leases_held,
            updated_at=_time(b, "update_time"),
            cooldown_until=_time(b, "cooldown_until"),
            proto=b,
        )


@dataclasses.dataclass(frozen=True)
class Cooldown:
    """One live cooldown (CooldownHold): ``scope`` ``CONCURRENCY_KEY`` (``queue`` and
    ``concurrency_key`` set) or ``BUCKET`` (``bucket`` set)."""

    scope: str
    queue: str
    concurrency_key: str
    bucket: str
    #: No task of the key or bucket is leased before this time.
    until: datetime.datetime | None
    #: The task whose failed attempt set it.
    task_id: str
    proto: queue_pb2.CooldownHold = dataclasses.field(repr=False, compare=False)

    @classmethod
    def of(cls, c: queue_pb2.CooldownHold) -> Cooldown:
        return cls(
            scope=_name(broker_pb2.CooldownScope, c.scope, "COOLDOWN_SCOPE_"),
            queue=c.queue,
            concurrency_key=c.concurrency_key,
            bucket=c.bucket,
            until=_time(c, "until"),
            task_id=c.task_id,
            proto=c,
        )


def update_request(
    name: str, *, rate_limit: float | None = None, burst: int = 0, max_concurrent: int | None = None
) -> queue_pb2.UpdateBucketRequest:
    """The UpdateBucketRequest of ``update_bucket``: the mask names what is not None.
    ``rate_limit=0`` removes the rate limit, ``max_concurrent=0`` the concurrency limit;
    ``ValueError`` when nothing is to change."""
    req = queue_pb2.UpdateBucketRequest(name=name)
    paths: list[str] = []
    if rate_limit is not None:
        paths.append("rate_limit")
        if rate_limit:
            req.config.rate_limit.CopyFrom(queue_pb2.RateLimit(per_second=rate_limit, burst=burst))
    if max_concurrent is not None:
        paths.append("max_concurrent")
        req.config.max_concurrent = max_concurrent
    if not paths:
        raise ValueError("update_bucket: pass rate_limit or max_concurrent")
    req.update_mask.CopyFrom(field_mask_pb2.FieldMask(paths=paths))
    return req


def lift_request(*, queue: str = "", key: str = "", bucket: str = "") -> queue_pb2.LiftCooldownRequest:
    """The LiftCooldownRequest naming a queue's key, or a bucket (``ValueError`` otherwise)."""
    if bool(bucket) == bool(queue or key) or bool(queue) != bool(key):
        raise ValueError("lift_cooldown: pass queue and key, or bucket")
    return queue_pb2.LiftCooldownRequest(queue=queue, concurrency_key=key, bucket=bucket)


class BucketCalls:
    """The bucket and cooldown calls of ``Client`` (on its ``admin`` stub)."""

    admin: admin_pb2_grpc.AdminServiceStub

    def get_bucket(self, name: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> Bucket:
        """A bucket's settings, use now and cooldown; NOT_FOUND when it is not defined."""
        req = queue_pb2.GetBucketRequest(name=name)
        return Bucket.of(self.admin.GetBucket(req, timeout=seconds(timeout)).bucket)

    def list_buckets(self, *, timeout: Duration = spec.CALL_TIMEOUT) -> list[Bucket]:
        """Every defined bucket, by name."""
        resp = self.admin.ListBuckets(queue_pb2.ListBucketsRequest(), timeout=seconds(timeout))
        return [Bucket.of(b) for b in resp.buckets]

    def update_bucket(
        self,
        name: str,
        *,
        rate_limit: float | None = None,
        burst: int = 0,
        max_concurrent: int | None = None,
        timeout: Duration = spec.CALL_TIMEOUT,
    ) -> Bucket:
        """Changes what is given, defining the bucket if need be: ``rate_limit`` leases per
        second with ``burst`` (0: one second's worth; ``rate_limit=0`` removes the rate limit),
        ``max_concurrent`` leases held at once (0: no limit). What is not given stays."""
        req = update_request(name, rate_limit=rate_limit, burst=burst, max_concurrent=max_concurrent)
        return Bucket.of(self.admin.UpdateBucket(req, timeout=seconds(timeout)).bucket)

    def delete_bucket(self, name: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> None:
        """Removes a bucket (its tasks lease without its limits); NOT_FOUND when it is not defined."""
        self.admin.DeleteBucket(queue_pb2.DeleteBucketRequest(name=name), timeout=seconds(timeout))

    def list_cooldowns(
        self, *, queue: str = "", bucket: str = "", timeout: Duration = spec.CALL_TIMEOUT
    ) -> list[Cooldown]:
        """The live cooldowns, soonest end first; only ``queue``'s keys or ``bucket``'s when given."""
        req = queue_pb2.ListCooldownsRequest(queue=queue, bucket=bucket)
        return [Cooldown.of(c) for c in self.admin.ListCooldowns(req, timeout=seconds(timeout)).cooldowns]

    def lift_cooldown(
        self, *, queue: str = "", key: str = "", bucket: str = "", timeout: Duration = spec.CALL_TIMEOUT
    ) -> bool:
        """Ends the cooldown of ``queue``'s concurrency ``key``, or of ``bucket``, now; False
        when there was none."""
        req = lift_request(queue=queue, key=key, bucket=bucket)
        return bool(self.admin.LiftCooldown(req, timeout=seconds(timeout)).lifted)


class AsyncBucketCalls:
    """The same calls on ``AsyncClient`` (``await tb.get_bucket(name)``)."""

    if TYPE_CHECKING:

        @property
        def admin(self) -> admin_pb2_grpc.AdminServiceAsyncStub: ...

    async def get_bucket(self, name: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> Bucket:
        req = queue_pb2.GetBucketRequest(name=name)
        return Bucket.of((await self.admin.GetBucket(req, timeout=seconds(timeout))).bucket)

    async def list_buckets(self, *, timeout: Duration = spec.CALL_TIMEOUT) -> list[Bucket]:
        resp = await self.admin.ListBuckets(queue_pb2.ListBucketsRequest(), timeout=seconds(timeout))
        return [Bucket.of(b) for b in resp.buckets]

    async def update_bucket(
        self,
        name: str,
        *,
        rate_limit: float | None = None,
        burst: int = 0,
        max_concurrent: int | None = None,
        timeout: Duration = spec.CALL_TIMEOUT,
    ) -> Bucket:
        req = update_request(name, rate_limit=rate_limit, burst=burst, max_concurrent=max_concurrent)
        return Bucket.of((await self.admin.UpdateBucket(req, timeout=seconds(timeout))).bucket)

    async def delete_bucket(self, name: str, *, timeout: Duration = spec.CALL_TIMEOUT) -> None:
        await self.admin.DeleteBucket(queue_pb2.DeleteBucketRequest(name=name), timeout=seconds(timeout))

    async def list_cooldowns(
        self, *, queue: str = "", bucket: str = "", timeout: Duration = spec.CALL_TIMEOUT
    ) -> list[Cooldown]:
        req = queue_pb2.ListCooldownsRequest(queue=queue, bucket=bucket)
        resp = await self.admin.ListCooldowns(req, timeout=seconds(timeout))
        return [Cooldown.of(c) for c in resp.cooldowns]

    async def lift_cooldown(
        self, *, queue: str = "", key: str = "", bucket: str = "", timeout: Duration = spec.CALL_TIMEOUT
    ) -> bool:
        req = lift_request(queue=queue, key=key, bucket=bucket)
        return bool((await self.admin.LiftCooldown(req, timeout=seconds(timeout))).lifted)
