"""Worker: leases tasks, runs a handler on each in a thread pool, heartbeats, settles."""

from __future__ import annotations

import datetime
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

import grpc

from taskbroker import spec, tracing
from taskbroker.client import Client, duration
from taskbroker.context import CANCEL_REQUESTED, DEADLINE, STOPPING, TaskContext
from taskbroker.errors import PermanentError, RetryableError, WorkerStoppedError, is_lease_lost
from taskbroker.routing import check_labels
from taskbroker.v1 import broker_pb2

log = logging.getLogger("taskbroker.worker")

#: A handler returns the task's result (bytes or None) or raises to fail the attempt.
Handler = Callable[[TaskContext], "bytes | None"]


class Worker:
    """Runs ``handler`` on tasks leased from ``queues``, ``concurrency`` at a time.

    - Leases only as many tasks as it has free slots, long-polling ``poll_wait`` seconds.
    - Every third of ``lease_duration`` it extends all running leases in one Heartbeat call;
      a lost lease or an operator's cancel sets the task's ``ctx.cancelled``.
    - A handler's return value completes the task; PermanentError fails it for good;
      RetryableError or any other exception fails the attempt for a retry.
    - ``stop()`` stops leasing and waits for running handlers; after ``stop_timeout``
      seconds it sets their ``ctx.cancelled`` (reason ``"stopping"``) and keeps waiting.
    - ``run()`` in the main thread stops the same way on SIGTERM or SIGINT (Kubernetes, Ctrl-C).
    - A Lease refused with UNAUTHENTICATED, PERMISSION_DENIED, INVALID_ARGUMENT or
      UNIMPLEMENTED stops the worker: ``run()`` raises WorkerStoppedError. Other errors are
      retried after a jittered backoff.
    - A task's deadline sets its ``ctx.cancelled`` (reason ``"deadline"``).
    - With ``lease_next`` (the default), a finished task's Complete or Fail also leases the
      next task for the slot it frees (``lease_next`` on the settle, no wait), which then runs
      like a leased one: two calls per task instead of three. When none comes back, the long-poll
      Lease goes on as before. Never asked for while stopping. ``lease_next=False`` turns it off.

    Defaults follow docs/client-spec.md (``taskbroker.spec``).

    >>> w = Worker(Client.from_env(), ["emails"], send_email)
    >>> w.run()  # until SIGTERM, Ctrl-C or w.stop() from another thread
    >>> with Worker(Client.from_env(), ["emails"], send_email):  # runs in the background
    ...     ...  # leaving the block stops and drains it
    """

    def __init__(
        self,
        target: str | Client | grpc.Channel,
        queues: Sequence[str],
        handler: Handler,
        *,
        concurrency: int = spec.DEFAULT_CONCURRENCY,
        lease_duration: float = spec.DEFAULT_LEASE_DURATION,
        poll_wait: float = spec.DEFAULT_POLL_WAIT,
        worker_id: str | None = None,
        stop_timeout: float | None = spec.DEFAULT_STOP_TIMEOUT,
        labels: Mapping[str, str] | None = None,
        lease_next: bool = True,
    ) -> None:
        spec.check_worker_options(queues, concurrency, lease_duration, poll_wait)
        if isinstance(target, str):
            self._client = Client(target)
        elif isinstance(target, Client):
            self._client = target
        else:
            self._client = Client(channel=target)
        self._owns_client = isinstance(target, str)
        self._broker = self._client.broker
        self.queues = list(queues)
        self.handler = handler
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
        self._lease_call: grpc.Future | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: WorkerStoppedError | None = None

    @property
    def heartbeat_interval(self) -> float:
        return spec.heartbeat_interval(self.lease_duration)

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
        restore = self._install_signals() if handle_signals else {}
        heartbeats = threading.Thread(target=self._heartbeat_loop, name="taskbroker-heartbeat", daemon=True)
        heartbeats.start()
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
            pool.shutdown(wait=True)
            self._stopped.set()
            heartbeats.join()
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
                while not self._stopping and len(self._running) >= self.concurrency:
                    self._cond.wait()
                if self._stopping:
                    return
                free = self.concurrency - len(self._running)
                call = self._broker.Lease.future(
                    broker_pb2.LeaseRequest(
                        worker_id=self.worker_id,
                        queues=self.queues,
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
                failures = 0
            except (grpc.RpcError, grpc.FutureCancelledError) as err:
                if self._is_stopping():
                    return
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
                    ctx = self._admit(task)
                self._watch_deadline(ctx)
                pool.submit(self._handle, ctx, pool)

    def _admit(self, task: broker_pb2.LeasedTask) -> TaskContext:
        """Registers a leased task as running (its heartbeats start); call with _cond held."""
        ctx = TaskContext(task, self._broker, self.lease_duration)
        self._running[task.task_id] = ctx
        if self._stop_timed_out:
            ctx._cancel(STOPPING)
        return ctx

    def _watch_deadline(self, ctx: TaskContext) -> None:
        """Cancels the handler when the task's deadline passes (spec point 4)."""
        deadline = ctx.deadline
        if deadline is None:
            return
        delay = (deadline - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        timer = threading.Timer(max(delay, 0.0), ctx._cancel, args=(DEADLINE,))
        timer.daemon = True
        ctx._deadline_timer = timer
        timer.start()

    def _is_stopping(self) -> bool:
        with self._cond:
            return self._stopping

    def _drain(self) -> None:
        deadline = None if self.stop_timeout is None else time.monotonic() + self.stop_timeout
        with self._cond:
            while self._running:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    self._stop_timed_out = True
                    for ctx in self._running.values():
                        ctx._cancel(STOPPING)
                    deadline = None  # cancelled once; now wait for the handlers to return
                    continue
                self._cond.wait(remaining)

    # Running one task.

    def _handle(self, ctx: TaskContext, pool: ThreadPoolExecutor) -> None:
        """Runs ``ctx``, then in this same slot each task its settle leased (lease_next)."""
        current: TaskContext | None = ctx
        while current is not None:
            current = self._handle_one(current, pool)

    def _handle_one(self, ctx: TaskContext, pool: ThreadPoolExecutor) -> TaskContext | None:
        next_tasks: list[broker_pb2.LeasedTask] = []
        try:
            with tracing.task_context(ctx.task.metadata):
                next_tasks = self._run_handler(ctx)
        except Exception:  # a bug here must not kill the pool thread silently
            log.exception("task %s: settling failed", ctx.task_id)
        finally:
            timer = ctx._deadline_timer
            if timer is not None:
                timer.cancel()
            # One critical section: the finished task leaves and its successors take the slot,
            # so the lease loop never sees the slot free in between (and never over-leases).
            # Pop first: a failed task retried at once can come back with the same id.
            with self._cond:
                self._running.pop(ctx.task_id, None)
                nexts = [self._admit(task) for task in next_tasks]
                self.lease_next_tasks += len(nexts)
                self._cond.notify_all()
        for extra in nexts[1:]:  # more than the one asked for: never dropped, run beside
            self._watch_deadline(extra)
            pool.submit(self._handle, extra, pool)
        if not nexts:
            return None
        self._watch_deadline(nexts[0])
        return nexts[0]

    def _next_lease(self) -> broker_pb2.LeaseRequest | None:
        """The lease_next for a settle: the freed slot's task, no wait; None when off or stopping."""
        if not self.lease_next or self._is_stopping():
            return None
        return broker_pb2.LeaseRequest(
            worker_id=self.worker_id,
            queues=self.queues,
            max_tasks=1,
            lease_duration=duration(self.lease_duration),
            labels=self.labels,
        )

    def _run_handler(self, ctx: TaskContext) -> list[broker_pb2.LeasedTask]:
        """Runs the handler and settles the task with Complete or Fail from its outcome;
        returns the tasks the settle leased (lease_next)."""
        try:
            result = self.handler(ctx)
            error: BaseException | None = None
        except Exception as exc:  # noqa: BLE001 -- any handler error fails the attempt, by design
            result, error = None, exc
        if ctx.lost:
            log.warning("task %s: lease lost, not reporting (handler error: %s)", ctx.task_id, error)
            return []
        request: broker_pb2.CompleteRequest | broker_pb2.FailRequest
        if error is None:
            method = "Complete"
            request = broker_pb2.CompleteRequest(
                task_id=ctx.task_id, lease_token=ctx.task.lease_token, result=result or b""
            )
        else:
            method, request = "Fail", _fail_request(ctx, error)
        lease_next = self._next_lease()
        if lease_next is not None:
            request.lease_next.CopyFrom(lease_next)
        response = self._report(method, request)
        return list(response.next_tasks) if response is not None else []

    def _report(self, method: str, request: broker_pb2.CompleteRequest | broker_pb2.FailRequest) -> Any:
        """Sends Complete or Fail, retrying while the broker is unreachable (both are
        idempotent for one lease token); returns the answer. LEASE_LOST and other errors are
        logged and return None."""
        for attempt in range(spec.REPORT_ATTEMPTS):
            try:
                return getattr(self._broker, method)(request, timeout=spec.CALL_TIMEOUT)
            except grpc.RpcError as err:
                if is_lease_lost(err):
                    log.info("%s for task %s: lease lost, nothing reported", method, request.task_id)
                    return None
                retry = err.code() in spec.REPORT_RETRY_CODES
                if not retry or attempt == spec.REPORT_ATTEMPTS - 1:
                    log.error("%s for task %s failed: %s", method, request.task_id, err)
                    return None
            time.sleep(spec.backoff(attempt))
        return None

    # Heartbeats.

    def _heartbeat_loop(self) -> None:
        # Every third of the lease: two heartbeats may fail before a lease runs out.
        while not self._stopped.wait(self.heartbeat_interval):
            self._heartbeat_once()

    def _heartbeat_once(self) -> None:
        with self._cond:
            ctxs = list(self._running.values())
        if not ctxs:
            return
        req = broker_pb2.HeartbeatRequest(
            worker_id=self.worker_id,
            leases=[broker_pb2.LeaseRef(task_id=c.task_id, lease_token=c.task.lease_token) for c in ctxs],
            extend_by=duration(self.lease_duration),
        )
        try:
            resp = self._broker.Heartbeat(req, timeout=self.lease_duration / 3)
        except grpc.RpcError as err:
            log.warning("heartbeat for %d leases failed: %s", len(ctxs), err)
            # Without an answer, a lease past its expiry is as good as lost.
            now = datetime.datetime.now(datetime.timezone.utc)
            for c in ctxs:
                if c._expired(now):
                    c._mark_lost()
            return
        for c, status in zip(ctxs, resp.leases):  # statuses come in request order
            if status.lost:
                c._mark_lost()
            elif status.cancel_requested:
                c._cancel(CANCEL_REQUESTED)
            if status.HasField("lease_expires_at"):
                c._extended(status.lease_expires_at.ToDatetime(tzinfo=datetime.timezone.utc))


def _fail_request(ctx: TaskContext, error: BaseException) -> broker_pb2.FailRequest:
    req = broker_pb2.FailRequest(task_id=ctx.task_id, lease_token=ctx.task.lease_token)
    if isinstance(error, PermanentError):
        req.error_message = str(error)
        req.non_retryable = True
    elif isinstance(error, RetryableError):
        req.error_message = str(error)
        if error.retry_after is not None:
            req.retry_after.CopyFrom(duration(error.retry_after))
        req.prefer_same_worker = error.prefer_same_worker
    else:
        req.error_message = f"{type(error).__name__}: {error}"
    return req
