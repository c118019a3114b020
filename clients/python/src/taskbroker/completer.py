"""Completions share calls (docs/client-spec.md, point 16), for the sync Worker.

A handler that succeeded hands its Complete to the worker's completer. When no settle call is
in flight it is sent at once, alone, as a plain Complete, so a lone task is never delayed.
While a call is in flight the next Completes queue; when it returns, everything that queued
goes as one CompleteMany (at most MAX_BATCH completions and MAX_BATCH_BYTES of results; the
rest in the next call). Each completion gets the answer its own Complete would have had
(LEASE_LOST per task). A batch refused as a whole is sent again one Complete at a time; a
batch the broker does not answer is retried like a lone settle, each task until its own lease
is about to run out (point 11). A batch asks once for as many next tasks (lease_next) as its
completions asked for, and hands them out in order.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import grpc

from taskbroker import spec
from taskbroker.v1 import broker_pb2

if TYPE_CHECKING:
    from taskbroker.context import TaskContext
    from taskbroker.worker import Worker

log = logging.getLogger("taskbroker.worker")

#: Completions per CompleteMany at most (the broker takes up to 1000).
MAX_BATCH = 256
#: Result bytes per CompleteMany at most, well under the 4 MiB message limit.
MAX_BATCH_BYTES = 1024 * 1024


@dataclasses.dataclass
class Settled:
    """A completion's answer: the tasks leased for its slot (lease_next)."""

    next_tasks: Sequence[broker_pb2.LeasedTask]


@dataclasses.dataclass
class Item:
    ctx: TaskContext
    request: broker_pb2.CompleteRequest
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    answer: Any = None

    def reply(self, answer: Any) -> None:
        self.answer = answer
        self.done.set()


def take_batch(queue: collections.deque[Any], alone: bool) -> list[Any]:
    """The items of the next call: the first alone when no call was in flight just before
    (a lone Complete is never held back), else every queued one up to the limits."""
    batch = [queue.popleft()]
    size = len(batch[0].request.result)
    while not alone and queue and len(batch) < MAX_BATCH and size + len(queue[0].request.result) <= MAX_BATCH_BYTES:
        item = queue.popleft()
        size += len(item.request.result)
        batch.append(item)
    return batch


def batch_request(batch: Sequence[Any]) -> broker_pb2.CompleteManyRequest:
    """One CompleteMany for the batch, with one lease_next for as many tasks as asked."""
    req = broker_pb2.CompleteManyRequest()
    asking = 0
    for item in batch:
        c = broker_pb2.CompleteRequest()
        c.CopyFrom(item.request)
        if c.HasField("lease_next"):
            if asking == 0:
                req.lease_next.CopyFrom(c.lease_next)
            asking += 1
            c.ClearField("lease_next")
        req.completions.append(c)
    if asking:
        req.lease_next.max_tasks = asking
    return req


def hand_out(batch: Sequence[Any], resp: broker_pb2.CompleteManyResponse) -> list[tuple[Any, str, list[Any]]]:
    """Per item: its outcome name and the next tasks it gets (one per asking completion, in
    order; given even when its own lease was lost, so none is dropped)."""
    nexts = list(resp.next_tasks)
    out = []
    for item, r in zip(batch, resp.results):
        mine = [nexts.pop(0)] if item.request.HasField("lease_next") and nexts else []
        out.append((item, broker_pb2.CompleteOutcome.Name(r.outcome), mine))
    for t in nexts:
        log.error("task %s: the broker returned more tasks than asked for; its lease will expire", t.task_id)
    return out


class Completer:
    """The worker's completion sender: one thread."""

    def __init__(self, worker: Worker) -> None:
        self._w = worker
        self._cond = threading.Condition()
        self._queue: collections.deque[Item] = collections.deque()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="taskbroker-completer", daemon=True)
        self._thread.start()

    def queued(self) -> int:
        """Completions waiting behind the call in flight."""
        with self._cond:
            return len(self._queue)

    def wait_queued(self, n: int, timeout: float) -> bool:
        """Blocks until at least ``n`` completions wait (a test's hook); False at the timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._queue) >= n, timeout)

    def complete(self, ctx: TaskContext, request: broker_pb2.CompleteRequest) -> Any:
        """Completes one task: the answer (``.next_tasks``) or None, as ``Worker._report``."""
        item = Item(ctx, request)
        with self._cond:
            if self._closed:
                item = None  # type: ignore[assignment]
            else:
                self._queue.append(item)
                self._cond.notify_all()
        if item is None:  # the worker is past its drain: send it here
            return self._w._report(ctx, "Complete", request)
        item.done.wait()
        return item.answer

    def close(self) -> None:
        """Sends what is queued, then ends the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _loop(self) -> None:
        alone = True
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                batch = take_batch(self._queue, alone)
            try:
                if len(batch) == 1:
                    batch[0].reply(self._w._report(batch[0].ctx, "Complete", batch[0].request))
                else:
                    self._send(batch)
            except Exception:  # a bug here must not strand the handlers waiting on it
                log.exception("completing %d tasks failed", len(batch))
                for item in batch:
                    if not item.done.is_set():
                        item.reply(None)
            with self._cond:
                alone = not self._queue
                self._cond.notify_all()

    def _send(self, batch: list[Item]) -> None:
        w = self._w
        failures = 0
        while batch:
            try:
                w._metrics.settle_call("CompleteMany")
                resp = w._broker.CompleteMany(batch_request(batch), timeout=w._call_timeout())
            except grpc.RpcError as err:
                if err.code() not in spec.REPORT_RETRY_CODES:  # type: ignore[attr-defined]
                    log.warning("CompleteMany of %d tasks refused (%s); completing each alone", len(batch), err)
                    for item in batch:
                        item.reply(w._report(item.ctx, "Complete", item.request))
                    return
                pause = spec.backoff(failures)
                failures += 1
                batch = self._keep_retrying(batch, pause, err)
                if batch:
                    log.warning("CompleteMany of %d tasks failed, retrying in %.1fs: %s", len(batch), pause, err)
                if w._abandon.wait(pause):
                    for item in batch:
                        item.reply(None)
                    return
                continue
            if len(resp.results) != len(batch):
                log.error("CompleteMany answered %d results for %d tasks; completing each alone", len(resp.results), len(batch))
                for item in batch:
                    item.reply(w._report(item.ctx, "Complete", item.request))
                return
            for item, outcome, nexts in hand_out(batch, resp):
                if outcome == "COMPLETE_OUTCOME_LEASE_LOST":
                    item.ctx._lose("CompleteMany answered LEASE_LOST")
                elif outcome != "COMPLETE_OUTCOME_COMPLETED":
                    log.error("task %s: Complete failed: %s", item.ctx.task_id, outcome)
                    item.ctx._settle_failed = True
                item.reply(Settled(nexts))
            return

    def _keep_retrying(self, batch: list[Item], pause: float, err: grpc.RpcError) -> list[Item]:
        """The items still worth sending again after ``pause``: not lost, and their lease not
        about to run out (those are given up, each said once)."""
        keep = []
        later = time.monotonic() + pause
        for item in batch:
            ctx = item.ctx
            if ctx.lost:
                item.reply(None)
            elif ctx._lease_left(later) < spec.SETTLE_MARGIN:
                ctx._gave_up = True
                log.warning(
                    "task %s: Complete given up, the lease runs out before the broker answered (%s)", ctx.task_id, err
                )
                item.reply(None)
            else:
                self._w._metrics.settle_retry(ctx.task.queue)
                keep.append(item)
        return keep
