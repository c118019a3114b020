"""Runs clients/conformance/FAULTS.md against the broker at $TASKBROKER_ADDR, which
scripts/conformance.sh python --faults kills, restarts and pauses on request (the control
FIFOs $TASKBROKER_FAULT_CTL and $TASKBROKER_FAULT_ACK).

Each case runs twice, with the sync Worker and with the asyncio AsyncWorker; it passes when
both do. Prints one PASS/FAIL line per case, then "N passed, M failed"; exits 0 only when M is 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import string
import sys
import threading
import time
from collections.abc import Callable

import grpc
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from conformance_typed import counter_points
from taskbroker import (
    AsyncClient,
    AsyncTaskContext,
    AsyncWorker,
    Client,
    TaskContext,
    TaskFailedError,
    Worker,
    WorkerStoppedError,
)
from taskbroker import spec
from taskbroker.context import LEASE_LOST
from taskbroker.v1 import admin_pb2, broker_pb2

WORKER_ID = "conf-python"
State = broker_pb2.TaskState


class CaseFailed(Exception):
    pass


def check(cond: bool, reason: str) -> None:
    if not cond:
        raise CaseFailed(reason)


def fault(command: str) -> None:
    """Asks scripts/conformance.sh to do ``command`` to the broker; returns once it is done."""
    with open(os.environ["TASKBROKER_FAULT_CTL"], "w") as ctl:
        ctl.write(command + "\n")
    with open(os.environ["TASKBROKER_FAULT_ACK"]) as ack:
        reply = ack.readline().strip()
    if reply != "ok":
        raise CaseFailed(f"fault {command}: {reply}")


class Records(logging.Handler):
    """Keeps the records of the ``taskbroker`` loggers, to count what the worker logged."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock2 = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock2:
            self.records.append(record)

    def warnings_naming(self, text: str) -> list[str]:
        with self._lock2:
            return [r.getMessage() for r in self.records if r.levelno == logging.WARNING and text in r.getMessage()]


RECORDS = Records()


def queue_name(case: str) -> str:
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=6))
    return f"conf.python.{case}.{suffix}"


def get_task(tb: Client, task_id: str) -> admin_pb2.Task:
    return tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=10).task


def name(state: int) -> str:
    return State.Name(state)


def retry(max_attempts: int) -> broker_pb2.RetryPolicy:
    policy = broker_pb2.RetryPolicy(max_attempts=max_attempts)
    policy.initial_backoff.FromSeconds(0)
    return policy


# Checks shared by the sync and the asyncio run of each case.


def check_ran_once(tb: Client, ids: list[str], runs: int) -> None:
    tasks = tb.wait_all(ids, timeout=25)
    for t in tasks:
        check(
            t.state == State.TASK_STATE_SUCCEEDED and t.attempt == 1 and t.result == b"done",
            f"task {t.id} is {name(t.state)} attempt {t.attempt} result {t.result!r} "
            f"(last error {t.last_error!r}), want SUCCEEDED attempt 1 result b'done'",
        )
    check(runs == len(ids), f"the handler ran {runs} times for {len(ids)} tasks")


def check_told_by_clock(tb: Client, task_id: str, reason: str | None, told_after: float, lease: float) -> None:
    check(reason == LEASE_LOST, f"the handler was cancelled with {reason!r}, want {LEASE_LOST!r}")
    check(
        told_after <= lease + 1.0,
        f"the handler was told {told_after:.1f}s after the pause, want within the {lease:.0f}s lease + 1s",
    )
    t = tb.wait(task_id, timeout=20)
    check(
        t.state == State.TASK_STATE_SUCCEEDED and t.attempt == 2 and t.result == b"second",
        f"task is {name(t.state)} attempt {t.attempt} result {t.result!r}, want SUCCEEDED attempt 2 b'second'",
    )
    warns = RECORDS.warnings_naming(task_id)
    check(len(warns) == 1, f"{len(warns)} WARN lines name the task, want 1: {warns}")


def check_handed_back(tb: Client, task_id: str, took: float, stop_timeout: float) -> None:
    bound = stop_timeout + spec.STOP_MARGIN + 1.0
    check(took <= bound, f"stop took {took:.1f}s, want at most {bound:.1f}s")
    t = get_task(tb, task_id)
    check(
        t.state == State.TASK_STATE_READY and t.attempt == 1,
        f"after the stop the task is {name(t.state)} attempt {t.attempt}, want READY attempt 1 (handed back)",
    )


def check_failed_at_once(tb: Client, task_id: str, type_name: str) -> None:
    try:
        t = tb.wait(task_id, timeout=10)
    except TaskFailedError as failed:
        t = failed.task
    check(t.state == State.TASK_STATE_DEAD, f"task is {name(t.state)}, want DEAD (failed at once, 1 attempt)")
    check(type_name in t.last_error, f"last_error {t.last_error!r} does not name {type_name!r}")


def check_settle_calls(reader: InMemoryMetricReader) -> None:
    calls = counter_points(reader, "taskbroker.worker.settle.calls")
    got = {dict(k)["rpc"]: v for k, v in calls.items()}
    check(got == {"Complete": 1, "CompleteMany": 1}, f"settle calls {got}, want 1 Complete and 1 CompleteMany")


# The sync Worker.


def run_worker(w: Worker) -> threading.Thread:
    th = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
    th.start()
    return th


def sync_restart_mid_settle(tb: Client, q: str) -> None:
    ids = [tb.submit(q, b"x").task_id for _ in range(3)]
    started = threading.Semaphore(0)
    release = threading.Event()
    lock = threading.Lock()
    runs = [0]

    def handler(ctx: TaskContext) -> bytes:
        with lock:
            runs[0] += 1
        started.release()
        release.wait(30)
        return b"done"

    w = Worker(tb, [q], handler, concurrency=3, lease_duration=30, worker_id=WORKER_ID)
    th = run_worker(w)
    try:
        for _ in ids:
            check(started.acquire(timeout=20), "the handlers did not all start within 20 s")
        fault("kill")
        release.set()
        time.sleep(4)  # the outage itself (FAULTS.md): longer than five quick retries take
        fault("start")
        check_ran_once(tb, ids, runs[0])
    finally:
        release.set()
        w.stop(wait=False)
        th.join(40)


def sync_paused_past_lease(tb: Client, q: str) -> None:
    task_id = tb.submit(q, b"x", retry=retry(3)).task_id
    started, told = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def handler(ctx: TaskContext) -> bytes:
        if ctx.attempt > 1:
            return b"second"
        started.set()
        ctx.cancelled.wait(20)
        seen["reason"], seen["at"] = ctx.cancel_reason, time.monotonic()
        told.set()
        return b"late"

    lease = 2.0
    w = Worker(tb, [q], handler, concurrency=1, lease_duration=lease, worker_id=WORKER_ID)
    th = run_worker(w)
    try:
        check(started.wait(20), "the handler did not start within 20 s")
        paused_at = time.monotonic()
        fault("pause")
        try:
            check(told.wait(20), "the handler was not told within 20 s of the pause")
        finally:
            fault("resume")
        check_told_by_clock(tb, task_id, seen.get("reason"), float(seen["at"]) - paused_at, lease)  # type: ignore[arg-type]
    finally:
        w.stop(wait=False)
        th.join(40)


def sync_stop_bound(tb: Client, q: str) -> None:
    task_id = tb.submit(q, b"x").task_id
    started, latch = threading.Event(), threading.Event()

    def handler(ctx: TaskContext) -> bytes:
        started.set()
        latch.wait(60)  # ignores ctx.cancelled
        return b"ignored"

    w = Worker(tb, [q], handler, concurrency=1, stop_timeout=2.0, worker_id=WORKER_ID)
    th = run_worker(w)
    try:
        check(started.wait(20), "the handler did not start within 20 s")
        t0 = time.monotonic()
        w.stop()
        took = time.monotonic() - t0
        check_handed_back(tb, task_id, took, 2.0)
    finally:
        latch.set()
        th.join(10)


def sync_wrong_result_type(tb: Client, q: str) -> None:
    task_id = tb.submit(q, b"x", retry=retry(1)).task_id

    def handler(ctx: TaskContext) -> bytes:
        return {"not": "bytes"}  # type: ignore[return-value]

    w = Worker(tb, [q], handler, concurrency=1, worker_id=WORKER_ID)
    th = run_worker(w)
    try:
        check_failed_at_once(tb, task_id, "dict")
    finally:
        w.stop()
        th.join(10)


def sync_settle_batching(tb: Client, q: str) -> None:
    ids = [tb.submit(q, b"x").task_id for _ in range(10)]
    started = threading.Semaphore(0)
    release = threading.Event()
    lock = threading.Lock()
    runs = [0]

    def handler(ctx: TaskContext) -> bytes:
        with lock:
            runs[0] += 1
        started.release()
        release.wait(30)
        return b"done"

    reader = InMemoryMetricReader()
    w = Worker(tb, [q], handler, concurrency=10, worker_id=WORKER_ID, meter_provider=MeterProvider(metric_readers=[reader]))
    th = run_worker(w)
    try:
        for _ in ids:
            check(started.acquire(timeout=20), "the handlers did not all start within 20 s")
        fault("pause")
        try:
            release.set()
            queued = w._completer is not None and w._completer.wait_queued(9, 20)
            check(queued, f"{w.queued_completions} completions queued behind the call in flight, want 9")
        finally:
            fault("resume")
        check_ran_once(tb, ids, runs[0])
        w.stop()
        check_settle_calls(reader)
    finally:
        release.set()
        w.stop(wait=False)
        th.join(40)


def check_fail_fast(err: BaseException) -> None:
    """With fail_fast the error is one plain line saying what is wrong."""
    text = str(err)
    check(
        "not a gRPC broker" in text and "\n" not in text,
        f"with fail_fast the worker stopped with {text!r}, want one line saying the server is not a gRPC broker",
    )


def sync_http_port(tb: Client, q: str) -> None:
    for fail_fast in (False, True):
        err = sync_run_on_http_port(q, fail_fast)
        if fail_fast:
            check_fail_fast(err)


def sync_run_on_http_port(q: str, fail_fast: bool) -> BaseException:
    w = Worker(os.environ["TASKBROKER_HTTP_ADDR"], [q], lambda ctx: b"", worker_id=WORKER_ID, fail_fast=fail_fast)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            w.run(handle_signals=False)
        except BaseException as err:  # noqa: BLE001 -- recorded for the check
            failure.append(err)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(20)
    if th.is_alive():
        w.stop(wait=False)
        raise CaseFailed("the worker against the HTTP port still runs after 20 s")
    check(
        bool(failure) and isinstance(failure[0], WorkerStoppedError),
        f"the worker ended with {failure!r}, want WorkerStoppedError",
    )
    return failure[0]


# The asyncio AsyncWorker (its client made inside the running loop, its worker object too).


async def aio_restart_mid_settle(tb: Client, q: str) -> None:
    ids = [tb.submit(q, b"x").task_id for _ in range(3)]
    started: asyncio.Queue[None] = asyncio.Queue()
    release = asyncio.Event()
    runs = [0]

    async def handler(ctx: AsyncTaskContext) -> bytes:
        runs[0] += 1
        started.put_nowait(None)
        await release.wait()
        return b"done"

    w = AsyncWorker(os.environ["TASKBROKER_ADDR"], [q], handler, concurrency=3, lease_duration=30, worker_id=WORKER_ID)
    run = asyncio.ensure_future(w.run(handle_signals=False))
    try:
        for _ in ids:
            await asyncio.wait_for(started.get(), 20)
        await asyncio.to_thread(fault, "kill")
        release.set()
        await asyncio.sleep(4)  # the outage itself (FAULTS.md)
        await asyncio.to_thread(fault, "start")
        await asyncio.to_thread(check_ran_once, tb, ids, runs[0])
    finally:
        release.set()
        w.stop_soon()
        await asyncio.wait_for(run, 40)


async def aio_paused_past_lease(tb: Client, q: str) -> None:
    task_id = tb.submit(q, b"x", retry=retry(3)).task_id
    started, told = asyncio.Event(), asyncio.Event()
    seen: dict[str, object] = {}

    async def handler(ctx: AsyncTaskContext) -> bytes:
        if ctx.attempt > 1:
            return b"second"
        started.set()
        try:
            await asyncio.wait_for(ctx.cancelled.wait(), 20)
        finally:
            seen["reason"], seen["at"] = ctx.cancel_reason, time.monotonic()
            told.set()
        return b"late"

    lease = 2.0
    w = AsyncWorker(os.environ["TASKBROKER_ADDR"], [q], handler, concurrency=1, lease_duration=lease, worker_id=WORKER_ID)
    run = asyncio.ensure_future(w.run(handle_signals=False))
    try:
        await asyncio.wait_for(started.wait(), 20)
        paused_at = time.monotonic()
        await asyncio.to_thread(fault, "pause")
        try:
            await asyncio.wait_for(told.wait(), 20)
        finally:
            await asyncio.to_thread(fault, "resume")
        await asyncio.to_thread(
            check_told_by_clock, tb, task_id, seen.get("reason"), float(seen["at"]) - paused_at, lease  # type: ignore[arg-type]
        )
    finally:
        w.stop_soon()
        await asyncio.wait_for(run, 40)


async def aio_stop_bound(tb: Client, q: str) -> None:
    task_id = tb.submit(q, b"x").task_id
    started = asyncio.Event()
    latch = threading.Event()

    async def handler(ctx: AsyncTaskContext) -> bytes:
        started.set()
        while not latch.is_set():  # ignores ctx.cancelled and swallows its cancellation
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                pass
        return b"ignored"

    w = AsyncWorker(os.environ["TASKBROKER_ADDR"], [q], handler, concurrency=1, stop_timeout=2.0, worker_id=WORKER_ID)
    run = asyncio.ensure_future(w.run(handle_signals=False))
    try:
        await asyncio.wait_for(started.wait(), 20)
        t0 = time.monotonic()
        await w.stop()
        await run
        took = time.monotonic() - t0
        await asyncio.to_thread(check_handed_back, tb, task_id, took, 2.0)
    finally:
        latch.set()
        w.stop_soon()
        await asyncio.wait_for(asyncio.shield(run), 10)
        await asyncio.sleep(0.2)  # lets the abandoned handler see the latch and end


async def aio_wrong_result_type(tb: Client, q: str) -> None:
    task_id = tb.submit(q, b"x", retry=retry(1)).task_id

    async def handler(ctx: AsyncTaskContext) -> bytes:
        return 42  # type: ignore[return-value]

    w = AsyncWorker(os.environ["TASKBROKER_ADDR"], [q], handler, concurrency=1, worker_id=WORKER_ID)
    run = asyncio.ensure_future(w.run(handle_signals=False))
    try:
        await asyncio.to_thread(check_failed_at_once, tb, task_id, "int")
    finally:
        w.stop_soon()
        await asyncio.wait_for(run, 10)


async def aio_settle_batching(tb: Client, q: str) -> None:
    ids = [tb.submit(q, b"x").task_id for _ in range(10)]
    started: asyncio.Queue[None] = asyncio.Queue()
    release = asyncio.Event()
    runs = [0]

    async def handler(ctx: AsyncTaskContext) -> bytes:
        runs[0] += 1
        started.put_nowait(None)
        await release.wait()
        return b"done"

    reader = InMemoryMetricReader()
    w = AsyncWorker(
        os.environ["TASKBROKER_ADDR"], [q], handler, concurrency=10, worker_id=WORKER_ID,
        meter_provider=MeterProvider(metric_readers=[reader]),
    )
    run = asyncio.ensure_future(w.run(handle_signals=False))
    try:
        for _ in ids:
            await asyncio.wait_for(started.get(), 20)
        await asyncio.to_thread(fault, "pause")
        try:
            release.set()
            assert w._completer is not None
            try:
                await asyncio.wait_for(w._completer.wait_queued(9), 20)
            except asyncio.TimeoutError:
                raise CaseFailed(f"{w.queued_completions} completions queued behind the call in flight, want 9") from None
        finally:
            await asyncio.to_thread(fault, "resume")
        await asyncio.to_thread(check_ran_once, tb, ids, runs[0])
        await w.stop()
        await run
        check_settle_calls(reader)
    finally:
        release.set()
        w.stop_soon()
        await asyncio.wait_for(asyncio.shield(run), 40)


async def aio_http_port(tb: Client, q: str) -> None:
    async def handler(ctx: AsyncTaskContext) -> bytes:
        return b""

    for fail_fast in (False, True):
        w = AsyncWorker(os.environ["TASKBROKER_HTTP_ADDR"], [q], handler, worker_id=WORKER_ID, fail_fast=fail_fast)
        try:
            await asyncio.wait_for(w.run(handle_signals=False), 20)
        except WorkerStoppedError as err:
            if fail_fast:
                check_fail_fast(err)
            continue
        except asyncio.TimeoutError:
            raise CaseFailed("the worker against the HTTP port still runs after 20 s") from None
        raise CaseFailed("the worker against the HTTP port returned normally, want WorkerStoppedError")


CASES: list[tuple[str, Callable[[Client, str], None], Callable[[Client, str], object]]] = [
    ("restart_mid_settle", sync_restart_mid_settle, aio_restart_mid_settle),
    ("paused_past_lease", sync_paused_past_lease, aio_paused_past_lease),
    ("stop_bound", sync_stop_bound, aio_stop_bound),
    ("wrong_result_type", sync_wrong_result_type, aio_wrong_result_type),
    ("http_port", sync_http_port, aio_http_port),
    ("settle_batching", sync_settle_batching, aio_settle_batching),
]


def explain(err: BaseException) -> str:
    if isinstance(err, CaseFailed):
        return str(err)
    if isinstance(err, grpc.RpcError):
        return f"unexpected {err.code().name}: {err.details()}"  # type: ignore[attr-defined]
    return f"{type(err).__name__}: {err}"


def main() -> int:
    if not os.environ.get("TASKBROKER_FAULT_CTL"):
        print("TASKBROKER_FAULT_CTL is not set: run scripts/conformance.sh python --faults", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="  log %(levelname)s %(name)s: %(message)s")
    logging.getLogger("taskbroker").addHandler(RECORDS)
    passed = failed = 0
    with Client.from_env() as tb:
        for case, sync_fn, aio_fn in CASES:
            reasons = []
            for flavour, call in (
                ("sync", lambda: sync_fn(tb, queue_name(case))),
                ("asyncio", lambda: asyncio.run(aio_fn(tb, queue_name(case)))),  # type: ignore[arg-type]
            ):
                try:
                    call()
                except BaseException as err:  # noqa: BLE001 -- report, do not crash: the other cases still run
                    reasons.append(f"{flavour}: {explain(err)}")
            if reasons:
                failed += 1
                print(f"FAIL {case}: {'; '.join(reasons)}", flush=True)
            else:
                passed += 1
                print(f"PASS {case}", flush=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
