"""The asyncio client and worker (``grpc.aio``), beside the sync ones and with the same
behaviour (docs/client-spec.md): ``AsyncClient``, ``AsyncWorker``, ``AsyncTaskContext``.

>>> async def send(ctx: AsyncTaskContext) -> bytes:
...     await ctx.checkpoint(b"rendered")
...     return b"sent"
>>> async with AsyncClient.from_env() as tb:
...     await tb.submit("emails", b"hi")
...     async with AsyncWorker(tb, ["emails"], send):
...         await asyncio.sleep(60)  # the worker runs in the background meanwhile
>>> await AsyncWorker(AsyncClient.from_env(), ["emails"], send).run()  # until SIGTERM/Ctrl-C
"""

from __future__ import annotations

# The client and the task context live in aio_client and aio_context; the ``X as X`` imports
# re-export them from here, where they have always been imported from.
# ruff: noqa: PLC0414
import asyncio
import datetime
import inspect
import logging
import os
import signal
import socket
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc
import grpc.aio

from taskbroker import handlers, metrics, spec, tracing
from taskbroker.aio_client import AsyncClient as AsyncClient
from taskbroker.aio_client import _Token as _Token
from taskbroker.aio_client import _UnaryStreamToken as _UnaryStreamToken
from taskbroker.aio_client import _UnaryUnaryToken as _UnaryUnaryToken
from taskbroker.aio_completer import AsyncCompleter
from taskbroker.aio_context import AsyncHandler as AsyncHandler
from taskbroker.aio_context import AsyncTaskContext as AsyncTaskContext
from taskbroker.aio_context import _fail_request as _fail_request
from taskbroker.client import duration
from taskbroker.context import CANCEL_REQUESTED, DEADLINE, STOPPING
from taskbroker.errors import WorkerStoppedError, is_lease_lost
from taskbroker.policy import QueuePolicy, TaskDef, lease_plan, policy_of
from taskbroker.routing import check_labels
from taskbroker.serde import Serializer
from taskbroker.spec import Duration, seconds
from taskbroker.v1 import broker_pb2, broker_pb2_grpc

log = logging.getLogger("taskbroker.aio")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class AsyncWorker:
    """Runs an ``async def`` handler on leased tasks, ``concurrency`` at a time, with the sync
    Worker's behaviour: free-slot leasing, batched heartbeats, checkpoint extension, deadline
    cancellation, the four stop codes (``run()`` raises WorkerStoppedError), jittered backoff,
    drain on SIGTERM/SIGINT (``run()`` on the main thread's loop) or ``stop()``, and
    ``lease_next`` (a settle also leases the freed slot's next task; ``lease_next=False``
    turns it off). Handlers by queue (``@worker.handler("emails")`` on ``async def``
    functions, typed payloads and results), ``middleware`` (``async def mw(ctx, call_next)``),
    OpenTelemetry metrics, Completes batched into CompleteMany and ``fail_fast`` as in
    ``Worker``; durations are ``timedelta`` or seconds.

    >>> worker = AsyncWorker(AsyncClient.from_env())
    >>> @worker.handler("emails")
    ... async def send(email: Email, ctx: AsyncTaskContext) -> Receipt: ...
    >>> await worker.run()
    """

    def __init__(
        self,
        target: str | AsyncClient,
        queues: Sequence[str] | None = None,
        handler: AsyncHandler | None = None,
        *,
        concurrency: int = spec.DEFAULT_CONCURRENCY,
        lease_duration: Duration = spec.DEFAULT_LEASE_DURATION,
        poll_wait: Duration = spec.DEFAULT_POLL_WAIT,
        worker_id: str | None = None,
        stop_timeout: Duration | None = spec.DEFAULT_STOP_TIMEOUT,
        labels: Mapping[str, str] | None = None,
        lease_next: bool = True,
        middleware: Sequence[handlers.AsyncMiddleware] = (),
        serializer: Serializer | None = None,
        meter_provider: Any = None,
        fail_fast: bool = False,
    ) -> None:
        lease_duration, poll_wait = seconds(lease_duration), seconds(poll_wait)
        stop_timeout = None if stop_timeout is None else seconds(stop_timeout)
        if (queues is None) != (handler is None):
            raise ValueError(
                "pass queues and a handler together, or neither and register handlers with @worker.handler(queue)"
            )
        spec.check_worker_options(queues, concurrency, lease_duration, poll_wait)
        self._owns_client = isinstance(target, str)
        self._client = AsyncClient(target) if isinstance(target, str) else target
        self._handlers: dict[str, handlers.Registered] = {}
        if queues is not None and handler is not None:
            self._handlers = {q: handlers.raw(q, handler) for q in queues}
        self._middleware: list[handlers.AsyncMiddleware] = list(middleware)
        #: Each queue's policy declared with its handler (``taskbroker.policy``).
        self._policies: dict[str, QueuePolicy] = {}
        #: Encodes results and decodes payloads for registered handlers (the client's by default).
        self.serializer: Serializer = serializer or self._client.serializer
        self._metrics = metrics.WorkerMetrics(meter_provider)
        #: Whether a Lease failing with a configuration error stops the worker at once.
        self.fail_fast = fail_fast
        self._completer: AsyncCompleter | None = None
        self._running_loop = False
        self.concurrency = concurrency
        self.lease_duration = lease_duration
        self.poll_wait = poll_wait
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.stop_timeout = stop_timeout
        self.labels = check_labels(labels)
        #: Whether Complete and Fail also lease the next task for the freed slot.
        self.lease_next = lease_next
        #: How many tasks came back in a settle's ``next_tasks`` (and ran) so far.
        self.lease_next_tasks = 0
        self._running: dict[str, AsyncTaskContext] = {}
        self._stop_timed_out = False  # then a task a settle still brings is cancelled at once
        self._stopping: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._hard_deadline: float | None = None  # set when a stop with a timeout begins
        self._abandon: asyncio.Event | None = None  # settles still retrying give up

    @property
    def _broker(self) -> broker_pb2_grpc.BrokerServiceAsyncStub:
        # Made on first use, inside the running loop (the client makes its channel lazily).
        return self._client.broker

    @property
    def heartbeat_interval(self) -> float:
        return spec.heartbeat_interval(self.lease_duration)

    @property
    def queues(self) -> list[str]:
        """Every queue with a handler: what each Lease asks for."""
        return list(self._handlers)

    def handler(self, queue: str, **policy: Any) -> Callable[[F], F]:
        """A decorator: ``@worker.handler("emails")`` registers the ``async def`` function for
        that queue (see ``handle``), with the queue's policy as keyword arguments, as
        ``Worker.handler``."""

        def register(fn: F) -> F:
            self.handle(queue, fn, **policy)
            return fn

        return register

    def task(self, definition: TaskDef[Any, Any]) -> Callable[[F], F]:
        """A decorator registering the handler of a ``TaskDef``'s queue, under its policy."""
        return self.handler(definition.queue, policy=definition.policy)

    def handle(
        self, queue: str, fn: Callable[..., Awaitable[Any]], *, policy: QueuePolicy | None = None, **options: Any
    ) -> None:
        """Runs ``async def fn`` for the tasks of ``queue``, its parameters filled by their
        annotations (an ``AsyncTaskContext``, the payload decoded into its type), its return
        value encoded as the result (``taskbroker.handlers``). One handler per queue."""
        if self._running_loop:
            raise RuntimeError("register handlers before the worker runs")
        if queue in self._handlers:
            raise ValueError(f"queue {queue} already has a handler")
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"handler for queue {queue}: the AsyncWorker takes async def functions")
        self._handlers[queue] = handlers.register(queue, fn, AsyncTaskContext)
        p = policy_of(policy, **options)
        if p is not None:
            self._policies[queue] = p
            self._client.retry_defaults[queue] = p.retry()

    def use(self, middleware: handlers.AsyncMiddleware) -> handlers.AsyncMiddleware:
        """Adds ``async def middleware(ctx, call_next)`` around every handler call (also a
        decorator); the first added is the outermost."""
        self._middleware.append(middleware)
        return middleware

    @property
    def queued_completions(self) -> int:
        """Completions waiting behind the settle call in flight (sent next as one CompleteMany)."""
        return self._completer.queued() if self._completer is not None else 0

    def _call_timeout(self) -> float:
        """A settle's deadline: the call deadline, or what is left of the stop margin."""
        timeout = spec.CALL_TIMEOUT
        if self._hard_deadline is not None:
            timeout = max(min(timeout, self._hard_deadline - asyncio.get_running_loop().time()), 0.05)
        return timeout

    async def __aenter__(self) -> AsyncWorker:  # noqa: PYI034
        self._task = asyncio.get_running_loop().create_task(self.run(handle_signals=False))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def stop_soon(self) -> None:
        """Asks the worker to stop (from a signal handler or a callback); run() then drains."""
        if self._stopping is not None:
            self._stopping.set()
        if self._changed is not None:
            self._changed.set()

    async def stop(self) -> None:
        """Stops leasing and waits for the drain (see ``stop_timeout``)."""
        self.stop_soon()
        if self._task is not None:
            try:
                await self._task
            except WorkerStoppedError:
                pass

    async def run(self, *, handle_signals: bool = True) -> None:
        """Leases and handles tasks until ``stop()`` (or SIGTERM/SIGINT with ``handle_signals``,
        on the main thread); returns once drained. Raises WorkerStoppedError when the broker
        refused the Lease for good."""
        if not self._handlers:
            raise ValueError("the worker has no queues: register a handler with @worker.handler(queue)")
        loop = asyncio.get_running_loop()
        self._running_loop = True
        self._stopping, self._changed, self._abandon = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._completer = AsyncCompleter(self)
        signals = []
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop_soon)
                signals.append(sig)
        heartbeats = loop.create_task(self._heartbeat_loop())
        failure: WorkerStoppedError | None = None
        try:
            await self._lease_loop()
        except WorkerStoppedError as err:
            failure = err
            log.error("worker stopped: %s", err)
        finally:
            self._stopping.set()
            await self._drain()
            await self._completer.close()
            heartbeats.cancel()
            for sig in signals:
                loop.remove_signal_handler(sig)
            if self._owns_client:
                await self._client.close()
        if failure is not None:
            raise failure

    async def _lease_loop(self) -> None:
        assert self._stopping is not None and self._changed is not None
        failures = 0
        while not self._stopping.is_set():
            while self._lease_plan()[1] <= 0 and not self._stopping.is_set():
                self._changed.clear()
                await self._changed.wait()
            if self._stopping.is_set():
                return
            queues, free = self._lease_plan()
            req = broker_pb2.LeaseRequest(
                worker_id=self.worker_id, queues=queues, max_tasks=free,
                lease_duration=duration(self.lease_duration), wait=duration(self.poll_wait),
                labels=self.labels,
            )
            call = asyncio.ensure_future(self._broker.Lease(req, timeout=self.poll_wait + spec.LEASE_MARGIN))
            stop = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait({call, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not call.done():
                call.cancel()  # a task granted in this instant returns when its lease expires
                return
            try:
                tasks = list(call.result().tasks)
                # A long poll's lease starts when the broker grants it, just before this answer
                # arrives: its expiry by this process's clock counts from now.
                got = asyncio.get_running_loop().time()
                failures = 0
            except grpc.aio.AioRpcError as err:
                plain = spec.config_error(err) if self.fail_fast else None
                if plain is not None:
                    raise WorkerStoppedError(plain, err.code()) from err
                if spec.stops_worker(err):
                    raise WorkerStoppedError(f"lease refused: {err.code().name}: {err.details()}", err.code()) from err
                pause = spec.backoff(failures)
                failures += 1
                log.warning("lease failed, retrying in %.1fs: %s", pause, err)
                try:
                    await asyncio.wait_for(self._stopping.wait(), pause)
                except asyncio.TimeoutError:
                    pass
                continue
            for t in tasks:
                self._start(t, got)

    def _start(self, task: broker_pb2.LeasedTask, sent: float) -> None:
        ctx = AsyncTaskContext(task, self._broker, self.lease_duration, sent + self.lease_duration, self.serializer)
        self._running[task.task_id] = ctx
        ctx._watch_lease()
        loop = asyncio.get_running_loop()
        timer = None
        if ctx.deadline is not None:
            delay = (ctx.deadline - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
            timer = loop.call_later(max(delay, 0.0), lambda: ctx._cancel(DEADLINE, hard=True))
        ctx._runner = loop.create_task(self._handle(ctx, timer))
        if self._stop_timed_out:
            # Not hard: a task cancelled before its first step would skip _handle's cleanup.
            ctx._cancel(STOPPING)

    async def _handle(self, ctx: AsyncTaskContext, timer: asyncio.TimerHandle | None) -> None:
        next_tasks: list[broker_pb2.LeasedTask] = []
        sent = 0.0
        reg = self._handlers[ctx.task.queue]

        async def call() -> Any:
            return await reg.fn(*reg.args(ctx, self.serializer))

        try:
            result: Any = None
            error: BaseException | None = None
            started = asyncio.get_running_loop().time()
            try:
                with tracing.process_span(ctx.task, self._metrics):
                    result = await handlers.chain_async(self._middleware, ctx, call)
            except asyncio.CancelledError as exc:
                if ctx.cancel_reason is None:
                    raise
                # Our own deadline or hard stop: report it, so the cancel is consumed here.
                current = asyncio.current_task()
                if current is not None and hasattr(current, "uncancel"):
                    current.uncancel()
                error = exc
            except Exception as exc:  # noqa: BLE001 -- any handler error fails the attempt, by design
                error = exc
                if ctx.queue in self._policies:
                    error = self._policies[ctx.queue].classify(exc)
            ran = asyncio.get_running_loop().time() - started
            if timer is not None:
                timer.cancel()
            if ctx._left_behind:
                log.debug("task %s: handler returned after it was handed back; result discarded", ctx.task_id)
                return
            ctx._settling = True
            if ctx.lost:
                self._metrics.task(ctx.queue, metrics.LEASE_LOST, ran)
                return  # logged once when it was lost
            data = b""
            if error is None:
                try:
                    data = handlers.encode_result(reg, self.serializer, result)
                except TypeError as exc:
                    error = exc
                    log.error("task %s: %s", ctx.task_id, error)
            elif not isinstance(error, asyncio.CancelledError):
                handlers.log_failure(log, ctx, error)
            request: broker_pb2.CompleteRequest | broker_pb2.FailRequest
            if error is None:
                request = broker_pb2.CompleteRequest(task_id=ctx.task_id, lease_token=ctx.task.lease_token, result=data)
            else:
                request = _fail_request(ctx, error)
            lease_next = self._next_lease(ctx)
            if lease_next is not None:
                request.lease_next.CopyFrom(lease_next)
            sent = asyncio.get_running_loop().time()
            if error is not None:
                response = await self._report(ctx, "Fail", request)
            elif self._completer is not None:
                response = await self._completer.complete(ctx, request)  # type: ignore[arg-type]
            else:
                response = await self._report(ctx, "Complete", request)
            self._metrics.task(ctx.queue, metrics.outcome(ctx, error, response), ran)
            if response is not None:
                next_tasks = list(response.next_tasks)
        finally:
            if ctx._expiry is not None:
                ctx._expiry.cancel()
            # No await between: the finished task leaves and its successors (lease_next) take
            # the slot at once, so the lease loop never sees it free in between. Pop first: a
            # failed task retried at once can come back with the same id.
            if self._running.get(ctx.task_id) is ctx:
                del self._running[ctx.task_id]
            for task in next_tasks:
                self.lease_next_tasks += 1
                self._start(task, sent)
            if self._changed is not None:
                self._changed.set()

    def _lease_plan(self, leaving: AsyncTaskContext | None = None) -> tuple[list[str], int]:
        """The queues to lease from and how many tasks at most: every queue and the free
        slots, less the queues whose own ``concurrency`` is full."""
        running = [c for c in self._running.values() if c is not leaving]
        limits = {q: p.concurrency for q, p in self._policies.items() if p.concurrency}
        free = self.concurrency - len(running)
        queues, n = lease_plan(self.queues, limits, Counter(c.queue for c in running), free)
        return queues, (n if queues else 0)

    def _next_lease(self, ctx: AsyncTaskContext) -> broker_pb2.LeaseRequest | None:
        """The lease_next for a settle: the freed slot's task, no wait; None when off or stopping."""
        if not self.lease_next or self._stopping is None or self._stopping.is_set():
            return None
        queues, n = self._lease_plan(leaving=ctx)
        if n <= 0:
            return None
        return broker_pb2.LeaseRequest(
            worker_id=self.worker_id, queues=queues, max_tasks=1,
            lease_duration=duration(self.lease_duration), labels=self.labels,
        )

    async def _report(self, ctx: AsyncTaskContext, method: str, request: Any) -> Any:
        """Sends Complete or Fail, retried while the broker is unreachable until the lease is
        about to run out (spec point 11); the answer, or None (each reason logged)."""
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            try:
                self._metrics.settle_call(method)
                return await getattr(self._broker, method)(request, timeout=self._call_timeout())
            except grpc.aio.AioRpcError as err:
                if is_lease_lost(err):
                    ctx._lose(f"{method} answered LEASE_LOST")
                    return None
                if err.code() not in spec.REPORT_RETRY_CODES:
                    log.error("task %s: %s failed: %s: %s", ctx.task_id, method, err.code().name, err.details())
                    ctx._settle_failed = True
                    return None
                pause = spec.backoff(failures)
                failures += 1
                if ctx.lost:
                    return None  # the lease ran out by the local clock, and that was said
                if ctx._valid_until - (loop.time() + pause) < spec.SETTLE_MARGIN:
                    log.warning(
                        "task %s: %s given up, the lease runs out before the broker answered (%s: %s)",
                        ctx.task_id, method, err.code().name, err.details(),
                    )
                    ctx._gave_up = True
                    return None
                self._metrics.settle_retry(ctx.queue)
                log.warning(
                    "task %s: %s failed, retrying in %.1fs: %s: %s",
                    ctx.task_id, method, pause, err.code().name, err.details(),
                )
            assert self._abandon is not None
            try:
                await asyncio.wait_for(self._abandon.wait(), pause)
                return None
            except asyncio.TimeoutError:
                pass

    async def _wait_running(self, until: float | None) -> bool:
        """Waits for every running task (and those their settles bring) to end, up to the loop
        time ``until``; True when none is left."""
        loop = asyncio.get_running_loop()
        while True:
            running = [c._runner for c in self._running.values() if c._runner and not c._runner.done()]
            if not running:
                return True
            timeout = None if until is None else until - loop.time()
            if timeout is not None and timeout <= 0:
                return False
            await asyncio.wait(running, timeout=timeout)

    async def _drain(self) -> None:
        """Waits up to the stop timeout, cancels the handlers, waits HANDBACK_GRACE more, then
        hands back the tasks of those still running and leaves them behind: returns within
        stop_timeout + STOP_MARGIN (spec point 11)."""
        loop = asyncio.get_running_loop()
        if self.stop_timeout is None:
            await self._wait_running(None)
            return
        start = loop.time()
        self._hard_deadline = start + self.stop_timeout + spec.STOP_MARGIN
        if await self._wait_running(start + self.stop_timeout):
            return
        self._stop_timed_out = True
        for c in list(self._running.values()):
            c._cancel(STOPPING, hard=True)
        if await self._wait_running(loop.time() + spec.HANDBACK_GRACE):
            return
        left = [c for c in self._running.values() if not c._settling]
        for c in left:
            c._left_behind = True
            del self._running[c.task_id]
        await self._hand_back(left)
        if not await self._wait_running(self._hard_deadline):
            assert self._abandon is not None
            self._abandon.set()
            for c in self._running.values():
                log.warning("task %s: its outcome is not reported (the stop margin ran out)", c.task_id)

    async def _hand_back(self, ctxs: list[AsyncTaskContext]) -> None:
        """Fails each task retryable with retry_after 0 (READY at once), all at once, within
        what is left of the stop margin."""
        if not ctxs:
            return
        assert self._hard_deadline is not None
        timeout = max(self._hard_deadline - asyncio.get_running_loop().time(), 0.05)

        async def one(c: AsyncTaskContext) -> None:
            req = broker_pb2.FailRequest(
                task_id=c.task_id, lease_token=c.task.lease_token, error_message=spec.HANDBACK_MESSAGE
            )
            req.retry_after.CopyFrom(duration(0))
            try:
                await self._broker.Fail(req, timeout=timeout)
                log.warning("task %s: handler still running at stop; task handed back", c.task_id)
            except grpc.aio.AioRpcError as err:
                log.warning(
                    "task %s: handler still running at stop; hand-back failed (%s: %s), the task waits for its lease to expire",
                    c.task_id, err.code().name, err.details(),
                )

        await asyncio.gather(*(one(c) for c in ctxs))

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            ctxs = [c for c in self._running.values() if not c.lost]
            if not ctxs:
                continue
            req = broker_pb2.HeartbeatRequest(
                worker_id=self.worker_id,
                leases=[broker_pb2.LeaseRef(task_id=c.task_id, lease_token=c.task.lease_token) for c in ctxs],
                extend_by=duration(self.lease_duration),
            )
            sent = asyncio.get_running_loop().time()
            try:
                resp = await self._broker.Heartbeat(req, timeout=min(self.heartbeat_interval, spec.CALL_TIMEOUT))
            except grpc.aio.AioRpcError as err:
                # Each context's own timer loses the leases that run out meanwhile.
                log.warning("heartbeat for %d leases failed: %s: %s", len(ctxs), err.code().name, err.details())
                continue
            for c, status in zip(ctxs, resp.leases):
                if status.lost:
                    # Unless the outcome is being reported: then the report settled it.
                    if not c._settling:
                        c._lose("the broker's heartbeat answer says so")
                    continue
                if status.cancel_requested:
                    c._cancel(CANCEL_REQUESTED)
                if status.HasField("lease_expires_at"):
                    c._expires_at = status.lease_expires_at.ToDatetime(tzinfo=datetime.timezone.utc)
                c._valid_until = max(c._valid_until, sent + self.lease_duration)
