"""Completions share calls, for the AsyncWorker: the rules of ``taskbroker.completer``
(docs/client-spec.md, point 16) on one asyncio task."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from taskbroker import spec
from taskbroker.completer import Settled, batch_request, hand_out, take_batch
from taskbroker.v1 import broker_pb2

if TYPE_CHECKING:
    from taskbroker.aio import AsyncTaskContext, AsyncWorker

log = logging.getLogger("taskbroker.aio")


@dataclasses.dataclass
class AsyncItem:
    ctx: AsyncTaskContext
    request: broker_pb2.CompleteRequest
    answer: asyncio.Future[Any]

    def reply(self, answer: Any) -> None:
        if not self.answer.done():
            self.answer.set_result(answer)


class AsyncCompleter:
    """The AsyncWorker's completion sender; made inside the running loop."""

    def __init__(self, worker: AsyncWorker) -> None:
        self._w = worker
        self._queue: collections.deque[AsyncItem] = collections.deque()
        self._changed = asyncio.Condition()
        self._closed = False
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def queued(self) -> int:
        """Completions waiting behind the call in flight."""
        return len(self._queue)

    async def wait_queued(self, n: int) -> None:
        """Returns once at least ``n`` completions wait (a test's hook)."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self._queue) >= n)

    async def complete(self, ctx: AsyncTaskContext, request: broker_pb2.CompleteRequest) -> Any:
        """Completes one task: the answer (``.next_tasks``) or None, as ``AsyncWorker._report``."""
        if self._closed:
            return await self._w._report(ctx, "Complete", request)
        item = AsyncItem(ctx, request, asyncio.get_running_loop().create_future())
        async with self._changed:
            self._queue.append(item)
            self._changed.notify_all()
        return await item.answer

    async def close(self) -> None:
        """Sends what is queued, then ends the task."""
        async with self._changed:
            self._closed = True
            self._changed.notify_all()
        await self._task

    async def _loop(self) -> None:
        alone = True
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: bool(self._queue) or self._closed)
                if not self._queue:
                    return
                batch = take_batch(self._queue, alone)
            try:
                if len(batch) == 1:
                    batch[0].reply(await self._w._report(batch[0].ctx, "Complete", batch[0].request))
                else:
                    await self._send(batch)
            except Exception:  # a bug here must not strand the handlers waiting on it
                log.exception("completing %d tasks failed", len(batch))
            for item in batch:
                item.reply(None)  # only those not answered yet
            async with self._changed:
                alone = not self._queue
                self._changed.notify_all()

    async def _send(self, batch: list[AsyncItem]) -> None:
        w = self._w
        loop = asyncio.get_running_loop()
        failures = 0
        while batch:
            try:
                w._metrics.settle_call("CompleteMany")
                resp = await w._broker.CompleteMany(batch_request(batch), timeout=w._call_timeout())
            except grpc.aio.AioRpcError as err:
                if err.code() not in spec.REPORT_RETRY_CODES:
                    log.warning("CompleteMany of %d tasks refused (%s: %s); completing each alone",
                                len(batch), err.code().name, err.details())
                    answers = await asyncio.gather(*(w._report(i.ctx, "Complete", i.request) for i in batch))
                    for item, answer in zip(batch, answers):
                        item.reply(answer)
                    return
                pause = spec.backoff(failures)
                failures += 1
                keep = []
                for item in batch:
                    ctx = item.ctx
                    if ctx.lost:
                        item.reply(None)
                    elif ctx._valid_until - (loop.time() + pause) < spec.SETTLE_MARGIN:
                        ctx._gave_up = True
                        log.warning(
                            "task %s: Complete given up, the lease runs out before the broker answered (%s: %s)",
                            ctx.task_id, err.code().name, err.details(),
                        )
                        item.reply(None)
                    else:
                        w._metrics.settle_retry(ctx.queue)
                        keep.append(item)
                batch = keep
                if batch:
                    log.warning("CompleteMany of %d tasks failed, retrying in %.1fs: %s: %s",
                                len(batch), pause, err.code().name, err.details())
                assert w._abandon is not None
                try:
                    await asyncio.wait_for(w._abandon.wait(), pause)
                    return  # abandoned at the stop margin: the rest are answered None
                except asyncio.TimeoutError:
                    continue
            if len(resp.results) != len(batch):
                log.error("CompleteMany answered %d results for %d tasks; completing each alone",
                          len(resp.results), len(batch))
                for item in batch:
                    item.reply(await w._report(item.ctx, "Complete", item.request))
                return
            for item, outcome, nexts in hand_out(batch, resp):
                if outcome == "COMPLETE_OUTCOME_LEASE_LOST":
                    item.ctx._lose("CompleteMany answered LEASE_LOST")
                elif outcome != "COMPLETE_OUTCOME_COMPLETED":
                    log.error("task %s: Complete failed: %s", item.ctx.task_id, outcome)
                    item.ctx._settle_failed = True
                item.reply(Settled(nexts))
            return
