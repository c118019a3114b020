"""Worker: leases tasks, runs a handler on each in a thread pool, heartbeats, settles."""

from __future__ import annotations

# Reporting an attempt lives in worker_settle, the heartbeat in worker_heartbeat; the
# ``X as X`` imports re-export the helpers from here, where they were imported from.
# ruff: noqa: PLC0414
import datetime
import inspect
import logging
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

import grpc

from taskbroker import handlers, metrics, spec, tracing
from taskbroker.client import Client, duration
from taskbroker.completer import Completer
from taskbroker.context import DEADLINE, STOPPING, TaskContext
from taskbroker.errors import WorkerStoppedError
from taskbroker.policy import QueuePolicy, TaskDef, lease_plan, policy_of
from taskbroker.routing import check_labels
from taskbroker.serde import Serializer
from taskbroker.spec import Duration, seconds
from taskbroker.v1 import broker_pb2
from taskbroker.worker_heartbeat import heartbeat
from taskbroker.worker_settle import _describe as _describe
from taskbroker.worker_settle import _fail_request as _fail_request
from taskbroker.worker_settle import hand_back, report

log = logging.getLogger("taskbroker.worker")

#: A handler returns the task's result (bytes, str as UTF-8, or None) or raises to fail the attempt.
Handler = Callable[[TaskContext], "bytes | str | None"]
F = TypeVar("F", bound=Callable[..., Any])


class Worker:
    """Runs ``handler`` on tasks leased from ``queues``, ``concurrency`` at a time.

    - Leases only as many tasks as it has free slots, long-polling ``poll_wait`` seconds.
    - Every third of ``lease_duration`` it extends all running leases in one Heartbeat call;
      a lost lease or an operator's cancel sets the task's ``ctx.cancelled``.
    - A handler's return value completes the task; PermanentError fails it for good;
      RetryableError or any other exception fails the attempt for a retry.
    - ``stop()`` stops leasing and waits for running handlers; after ``stop_timeout``
      seconds it sets their ``ctx.cancelled`` (reason ``"stopping"``), gives them
      ``spec.HANDBACK_GRACE`` to return, then hands the tasks of the rest back (Fail,
      retryable, ``retry_after`` 0: READY at once) and leaves their threads behind, so it
      returns within ``stop_timeout + spec.STOP_MARGIN``.
    - A Complete or Fail the broker does not answer is retried until the lease is about to
      run out (``spec.SETTLE_MARGIN``); a lease that runs out by this process's clock
      cancels the handler (reason ``"lease_lost"``) even when the broker does not answer.
    - A handler result that is not bytes, str or None fails the attempt with a message
      naming its type.
    - ``run()`` in the main thread stops the same way on SIGTERM or SIGINT (Kubernetes, Ctrl-C).
    - A Lease refused with UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT or
      UNIMPLEMENTED stops the worker: ``run()`` raises WorkerStoppedError. Other errors are
      retried after a jittered backoff.
    - A task's deadline sets its ``ctx.cancelled`` (reason ``"deadline"``).
    - With ``lease_next`` (the default), a finished task's Complete or Fail also leases the
      next task for the slot it frees (``lease_next`` on the settle, no wait), which then runs
      like a leased one: two calls per task instead of three. When none comes back, the long-poll
      Lease goes on as before. Never asked for while stopping. ``lease_next=False`` turns it off.

    - Handlers by queue (``@worker.handler("emails")``): one Lease asks for every registered
      queue; each handler gets its payload decoded into its parameter's type and its return
      value is encoded as the result (``taskbroker.handlers``, ``serializer``, JSON by default).
      A payload that does not decode fails the attempt for good, naming the queue and type.
    - ``middleware`` (``worker.use(fn)``) runs around every handler call, the first outermost.
    - Metrics through the OpenTelemetry API (``taskbroker.metrics``; ``meter_provider``).
    - Completes queued behind a settle in flight go as one CompleteMany (``taskbroker.completer``).
    - ``fail_fast``: a Lease that fails with a configuration error (TLS mismatch, not a gRPC
      port, UNAUTHENTICATED, PERMISSION_DENIED) stops the worker at once, in one plain line.
    - Durations are ``timedelta`` or seconds.

    Defaults follow docs/client-spec.md (``taskbroker.spec``).

    >>> worker = Worker(Client.from_env())
    >>> @worker.handler("emails")
    ... def send(email: Email, ctx: TaskContext) -> Receipt: ...
    >>> worker.run()
    >>> w = Worker(Client.from_env(), ["emails"], send_email)  # one raw handler, ctx -> bytes
    >>> w.run()  # until SIGTERM, Ctrl-C or w.stop() from another thread
    >>> with Worker(Client.from_env(), ["emails"], send_email):  # runs in the background
    ...     ...  # leaving the block stops and drains it
    """

    def __init__(
        self,
        target: str | Client | grpc.Channel,
        queues: Sequence[str] | None = None,
        handler: Handler | None = None,
        *,
        concurrency: int = spec.DEFAULT_CONCURRENCY,
        lease_duration: Duration = spec.DEFAULT_LEASE_DURATION,
        poll_wait: Duration = spec.DEFAULT_POLL_WAIT,
        worker_id: str | None = None,
        stop_timeout: Duration | None = spec.DEFAULT_STOP_TIMEOUT,
        labels: Mapping[str, str] | None = None,
        lease_next: bool = True,
        middleware: Sequence[handlers.Middleware] = (),
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
        if isinstance(target, str):
            self._client = Client(target)
        elif isinstance(target, Client):
            self._client = target
        else:
            self._client = Client(channel=target)
        self._owns_client = isinstance(target, str)
        self._broker = self._client.broker
        #: Each queue's handler; the constructor's ``handler`` serves its ``queues`` (raw).
        self._handlers: dict[str, handlers.Registered] = {}
        if queues is not None and handler is not None:
            self._handlers = {q: handlers.raw(q, handler) for q in queues}
        self._middleware: list[handlers.Middleware] = list(middleware)
        #: Each queue's policy declared with its handler (``taskbroker.policy``).
        self._policies: dict[str, QueuePolicy] = {}
        #: Encodes results and decodes payloads for registered handlers (the client's by default).
        self.serializer: Serializer = serializer or self._client.serializer
        self._metrics = metrics.WorkerMetrics(meter_provider)
        #: Whether a Lease failing with a configuration error stops the worker at once.
        self.fail_fast = fail_fast
        self._completer: Completer | None = None
        self.concurrency = concurrency
        self.lease_duration = lease_duration
        self.poll_wait = poll_wait
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.stop_timeout = stop_timeout
        #: What this worker is (``{"gpu": "a100"}``), sent with every Lease: a task targeted
        #: at labels goes only to a worker carrying every pair.
        self.labels = check_labels(labels)
        #: Whether Complete and Fail also lease the next task for the freed slot.
        self.lease_next = lease_next
        #: How many tasks came back in a settle's ``next_tasks`` (and ran) so far.
        self.lease_next_tasks = 0

        # _cond guards _running and _stopping: the lease loop waits on it for a free slot.
        self._cond = threading.Condition()
        self._running: dict[str, TaskContext] = {}
        self._stopping = False
        self._stop_timed_out = False  # then a task a settle still brings is cancelled at once
        # Set when a stop with a timeout begins: settles and hand-backs end by then.
        self._hard_deadline: float | None = None
        self._abandon = threading.Event()  # settles still retrying give up (the stop margin ran out)
        self._left_behind = False  # handler threads were left running at stop
        self._clock_stop = False
        self._lease_call: grpc.Future | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: WorkerStoppedError | None = None

    @property
    def heartbeat_interval(self) -> float:
        return spec.heartbeat_interval(self.lease_duration)

    @property
    def queues(self) -> list[str]:
        """Every queue with a handler: what each Lease asks for."""
        return list(self._handlers)

    # Handlers and middleware.

    def handler(self, queue: str, **policy: Any) -> Callable[[F], F]:
        """A decorator: ``@worker.handler("emails")`` registers the function for that queue
        (see ``handle``), with the queue's policy as keyword arguments (``max_attempts``,
        ``backoff``, ``backoff_multiplier``, ``max_backoff``, ``non_retryable``,
        ``concurrency``, or ``policy=QueuePolicy(...)``)."""

        def register(fn: F) -> F:
            self.handle(queue, fn, **policy)
            return fn

        return register

    def task(self, definition: TaskDef[Any, Any]) -> Callable[[F], F]:
        """A decorator registering the handler of a ``TaskDef``'s queue, under its policy."""
        return self.handler(definition.queue, policy=definition.policy)

    def _set_policy(self, queue: str, policy: QueuePolicy | None) -> None:
        if policy is None:
            return
        self._policies[queue] = policy
        self._client.retry_defaults[queue] = policy.retry()

    def handle(self, queue: str, fn: Callable[..., Any], *, policy: QueuePolicy | None = None, **options: Any) -> None:
        """Runs ``fn`` for the tasks of ``queue``; its parameters are filled by their
        annotations (a ``TaskContext``, the payload decoded into its type) and its return
        value is encoded as the result (``taskbroker.handlers``). One handler per queue."""
        if self._thread is not None or self._stopped.is_set():
            raise RuntimeError("register handlers before the worker runs")
        if queue in self._handlers:
            raise ValueError(f"queue {queue} already has a handler")
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"handler for queue {queue} is async def: run it on an AsyncWorker")
        self._handlers[queue] = handlers.register(queue, fn, TaskContext)
        self._set_policy(queue, policy_of(policy, **options))

    def use(self, middleware: handlers.Middleware) -> handlers.Middleware:
        """Adds ``middleware(ctx, call_next)`` around every handler call (also a decorator);
        the first added is the outermost."""
        self._middleware.append(middleware)
        return middleware

    @property
    def queued_completions(self) -> int:
        """Completions waiting behind the settle call in flight (sent next as one CompleteMany)."""
        return self._completer.queued() if self._completer is not None else 0

    def __enter__(self) -> Worker:  # noqa: PYI034 -- typing.Self needs 3.11
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # Life cycle.

    def start(self) -> None:
        """Runs the worker in a background thread; ``stop()`` ends it."""
        self._thread = threading.Thread(target=self.run, name="taskbroker-worker", daemon=True)
        self._thread.start()

    def run(self, *, handle_signals: bool = True) -> None:
        """Leases and handles tasks until ``stop()`` (or SIGTERM/SIGINT, when called in the main
        thread with ``handle_signals``); returns once everything has drained.

        Raises WorkerStoppedError when the broker refused the worker's Lease for good.
        """
        if not self._handlers:
            raise ValueError("the worker has no queues: register a handler with @worker.handler(queue)")
        self._completer = Completer(self)
        restore = self._install_signals() if handle_signals else {}
        heartbeats = threading.Thread(target=self._heartbeat_loop, name="taskbroker-heartbeat", daemon=True)
        heartbeats.start()
        clock = threading.Thread(target=self._clock_loop, name="taskbroker-clock", daemon=True)
        clock.start()
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="taskbroker-handler")
        try:
            try:
                self._lease_loop(pool)
            except WorkerStoppedError as err:
                self._failure = err
                log.error("worker stopped: %s", err)
                with self._cond:
                    self._stopping = True
            self._drain()
        finally:
            self._completer.close()
            # Handler threads left behind at stop are not waited for (a thread cannot be killed).
            pool.shutdown(wait=not self._left_behind, cancel_futures=self._left_behind)
            self._stopped.set()
            with self._cond:
                self._clock_stop = True
                self._cond.notify_all()
            clock.join()
            # A heartbeat in flight ends by its own deadline; the stop does not wait past its margin.
            heartbeats.join(None if self._hard_deadline is None else max(self._hard_deadline - time.monotonic(), 0.0))
            for sig, handler in restore.items():
                signal.signal(sig, handler)
            if self._owns_client:
                self._client.close()
        if self._failure is not None:
            raise self._failure

    @property
    def failure(self) -> WorkerStoppedError | None:
        """Why the worker stopped by itself, if it did (also raised by ``run()``)."""
        return self._failure

    def _install_signals(self) -> dict[signal.Signals, Any]:
        """SIGTERM and SIGINT call stop(wait=False); only the main thread may install them."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[signal.Signals, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda _sig, _frame: self.stop(wait=False))
        return previous

    def stop(self, wait: bool = True) -> None:
        """Stops leasing; with ``wait``, blocks until running handlers have finished."""
        with self._cond:
            self._stopping = True
            call = self._lease_call
            self._cond.notify_all()
        if call is not None:
            # Ends the long poll now. A task granted in that instant is not seen and
            # returns to the queue when its lease expires.
            call.cancel()
        if wait:
            if self._thread is not None:
                self._thread.join()
            else:
                self._stopped.wait()

    # Leasing.

    def _lease_loop(self, pool: ThreadPoolExecutor) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._stopping and self._lease_plan()[1] <= 0:
                    self._cond.wait()
                if self._stopping:
                    return
                queues, free = self._lease_plan()
                call = self._broker.Lease.future(
                    broker_pb2.LeaseRequest(
                        worker_id=self.worker_id,
                        queues=queues,
                        max_tasks=free,
                        lease_duration=duration(self.lease_duration),
                        wait=duration(self.poll_wait),
                        labels=self.labels,
                    ),
                    timeout=self.poll_wait + spec.LEASE_MARGIN,  # room for the long poll
                )
                self._lease_call = call
            try:
                tasks = list(call.result().tasks)
                # A long poll's lease starts when the broker grants it, just before this answer
                # arrives: its expiry by this process's clock counts from now.
                got = time.monotonic()
                failures = 0
            except (grpc.RpcError, grpc.FutureCancelledError) as err:
                if self._is_stopping():
                    return
                plain = spec.config_error(err) if self.fail_fast else None
                if plain is not None:
                    raise WorkerStoppedError(plain, err.code()) from err  # type: ignore[union-attr]
                if spec.stops_worker(err):
                    code = err.code()  # type: ignore[union-attr]
                    raise WorkerStoppedError(f"lease refused: {code.name}: {err.details()}", code) from err  # type: ignore[union-attr]
                pause = spec.backoff(failures)
                failures += 1
                log.warning("lease failed, retrying in %.1fs: %s", pause, err)
                with self._cond:
                    self._cond.wait_for(lambda: self._stopping, timeout=pause)
                continue
            finally:
                with self._cond:
                    self._lease_call = None
            for task in tasks:
                with self._cond:
                    ctx = self._admit(task, got)
                pool.submit(self._handle, ctx, pool)

    def _admit(self, task: broker_pb2.LeasedTask, sent: float) -> TaskContext:
        """Registers a leased task as running (its heartbeats and its clock start); call with
        _cond held. ``sent`` is when the lease began by this process's clock (time.monotonic():
        a settle's send time, a long poll's answer time)."""
        ctx = TaskContext(task, self._broker, self.lease_duration, sent + self.lease_duration, self.serializer)
        self._running[task.task_id] = ctx
        if self._stop_timed_out:
            ctx._cancel(STOPPING)
        self._cond.notify_all()  # the clock thread watches its deadline and lease from now
        return ctx

    def _clock_loop(self) -> None:
        """One thread for every running task's clock: cancels a handler when its task's
        deadline passes (spec point 4, reason "deadline") and when its lease runs out by this
        process's clock (point 11, reason "lease_lost"), whether or not the broker answers."""
        with self._cond:
            while not self._clock_stop:
                now = time.monotonic()
                wall = datetime.datetime.now(datetime.timezone.utc)
                wait = 5.0  # a bound, in case the wall clock jumps under a deadline
                for ctx in list(self._running.values()):
                    if ctx._left_behind or ctx.lost:
                        continue
                    left = ctx._lease_left(now)
                    if left <= 0:
                        ctx._lose("it ran out by the worker's clock without an extension")
                        continue
                    wait = min(wait, left)
                    deadline = ctx.deadline
                    if deadline is not None and not ctx._deadline_fired:
                        until = (deadline - wall).total_seconds()
                        if until <= 0:
                            ctx._deadline_fired = True
                            ctx._cancel(DEADLINE)
                        else:
                            wait = min(wait, until)
                self._cond.wait(wait)

    def _is_stopping(self) -> bool:
        with self._cond:
            return self._stopping

    def _drain(self) -> None:
        """Waits for running handlers up to the stop timeout, cancels them, waits
        HANDBACK_GRACE more, then hands back the tasks of those still running and leaves them
        behind: returns within stop_timeout + STOP_MARGIN (spec point 11)."""
        if self.stop_timeout is None:
            with self._cond:
                self._cond.wait_for(lambda: not self._running)
            return
        start = time.monotonic()
        self._hard_deadline = start + self.stop_timeout + spec.STOP_MARGIN
        with self._cond:
            if self._cond.wait_for(lambda: not self._running, self.stop_timeout):
                return
            self._stop_timed_out = True
            for ctx in self._running.values():
                ctx._cancel(STOPPING)
            if self._cond.wait_for(lambda: not self._running, spec.HANDBACK_GRACE):
                return
            left = [c for c in self._running.values() if not c._settling]
            for c in left:
                c._left_behind = True
                del self._running[c.task_id]
            self._left_behind = bool(left)
        self._hand_back(left)
        # Settles still retrying give up when the margin runs out.
        with self._cond:
            remaining = self._hard_deadline - time.monotonic()
            if not self._cond.wait_for(lambda: not self._running, max(remaining, 0.0)):
                self._abandon.set()
                for c in self._running.values():
                    log.warning("task %s: its outcome is not reported (the stop margin ran out)", c.task_id)

    def _hand_back(self, ctxs: list[TaskContext]) -> None:
        """Hands back the tasks of handlers still running at stop (``worker_settle.hand_back``),
        within what is left of the stop margin."""
        if not ctxs:
            return
        assert self._hard_deadline is not None
        hand_back(self._broker, ctxs, max(self._hard_deadline - time.monotonic(), 0.05))

    # Running one task.

    def _handle(self, ctx: TaskContext, pool: ThreadPoolExecutor) -> None:
        """Runs ``ctx``, then in this same slot each task its settle leased (lease_next)."""
        current: TaskContext | None = ctx
        while current is not None:
            current = self._handle_one(current, pool)

    def _handle_one(self, ctx: TaskContext, pool: ThreadPoolExecutor) -> TaskContext | None:
        next_tasks: list[tuple[broker_pb2.LeasedTask, float]] = []
        try:
            next_tasks = self._run_handler(ctx)
        except Exception:  # a bug here must not kill the pool thread silently
            log.exception("task %s: settling failed", ctx.task_id)
        finally:
            # One critical section: the finished task leaves and its successors take the slot,
            # so the lease loop never sees the slot free in between (and never over-leases).
            # Pop first: a failed task retried at once can come back with the same id.
            with self._cond:
                if self._running.get(ctx.task_id) is ctx:
                    del self._running[ctx.task_id]
                nexts = [self._admit(task, sent) for task, sent in next_tasks]
                self.lease_next_tasks += len(nexts)
                self._cond.notify_all()
        for extra in nexts[1:]:  # more than the one asked for: never dropped, run beside
            pool.submit(self._handle, extra, pool)
        if not nexts:
            return None
        return nexts[0]

    def _lease_plan(self, leaving: TaskContext | None = None) -> tuple[list[str], int]:
        """The queues to lease from and how many tasks at most (call with _cond held): every
        queue and the free slots, less the queues whose own ``concurrency`` is full."""
        running = [c for c in self._running.values() if c is not leaving]
        limits = {q: p.concurrency for q, p in self._policies.items() if p.concurrency}
        free = self.concurrency - len(running)
        queues, n = lease_plan(self.queues, limits, Counter(c.queue for c in running), free)
        return queues, (n if queues else 0)

    def _next_lease(self, ctx: TaskContext) -> broker_pb2.LeaseRequest | None:
        """The lease_next for a settle: the freed slot's task, no wait; None when off or stopping."""
        if not self.lease_next or self._is_stopping():
            return None
        with self._cond:
            queues, n = self._lease_plan(leaving=ctx)
        if n <= 0:
            return None
        return broker_pb2.LeaseRequest(
            worker_id=self.worker_id,
            queues=queues,
            max_tasks=1,
            lease_duration=duration(self.lease_duration),
            labels=self.labels,
        )

    def _run_handler(self, ctx: TaskContext) -> list[tuple[broker_pb2.LeasedTask, float]]:
        """Runs the handler (inside the middleware) and settles the task with Complete or Fail
        from its outcome; returns the tasks the settle leased (lease_next), each with the
        settle's send time."""
        reg = self._handlers[ctx.task.queue]
        error: BaseException | None = None
        started = time.monotonic()
        try:
            with tracing.process_span(ctx.task, self._metrics):
                result = handlers.chain(self._middleware, ctx, lambda: reg.fn(*reg.args(ctx, self.serializer)))
        except Exception as exc:  # noqa: BLE001 -- any handler error fails the attempt, by design
            result, error = None, exc
            if ctx.queue in self._policies:
                error = self._policies[ctx.queue].classify(exc)
        ran = time.monotonic() - started
        if ctx._left_behind:
            log.debug("task %s: handler returned after it was handed back; result discarded", ctx.task_id)
            return []
        ctx._settling = True
        if ctx.lost:
            self._metrics.task(ctx.queue, metrics.LEASE_LOST, ran)
            return []  # logged once when it was lost
        request: broker_pb2.CompleteRequest | broker_pb2.FailRequest
        data = b""
        if error is None:
            try:
                data = handlers.encode_result(reg, self.serializer, result)
            except TypeError as exc:
                error = exc
                log.error("task %s: %s", ctx.task_id, error)
        else:
            handlers.log_failure(log, ctx, error)
        if error is None:
            request = broker_pb2.CompleteRequest(task_id=ctx.task_id, lease_token=ctx.task.lease_token, result=data)
        else:
            request = _fail_request(ctx, error)
        lease_next = self._next_lease(ctx)
        if lease_next is not None:
            request.lease_next.CopyFrom(lease_next)
        sent = time.monotonic()
        if error is None:
            completer = self._completer
            response = (
                completer.complete(ctx, request)  # type: ignore[arg-type]
                if completer is not None
                else self._report(ctx, "Complete", request)
            )
        else:
            response = self._report(ctx, "Fail", request)
        self._metrics.task(ctx.queue, metrics.outcome(ctx, error, response), ran)
        return [(t, sent) for t in response.next_tasks] if response is not None else []

    def _call_timeout(self) -> float:
        """A settle's deadline: the call deadline, or what is left of the stop margin."""
        timeout = spec.CALL_TIMEOUT
        if self._hard_deadline is not None:
            timeout = max(min(timeout, self._hard_deadline - time.monotonic()), 0.05)
        return timeout

    def _report(self, ctx: TaskContext, method: str, request: broker_pb2.CompleteRequest | broker_pb2.FailRequest) -> Any:
        """Sends Complete or Fail (``worker_settle.report``): the answer, or None."""
        return report(self._broker, self._metrics, ctx, method, request, self._call_timeout, self._abandon)

    # Heartbeats.

    def _heartbeat_loop(self) -> None:
        # Every third of the lease: two heartbeats may fail before a lease runs out.
        while not self._stopped.wait(self.heartbeat_interval):
            self._heartbeat_once()

    def _heartbeat_once(self) -> None:
        with self._cond:
            ctxs = list(self._running.values())
        heartbeat(self._broker, self.worker_id, self.lease_duration, self.heartbeat_interval, ctxs)
