"""The client-library cases of clients/conformance/SCENARIO.md (docs/client-spec.md points
1 to 7), run by conformance.py after the contract cases."""

from __future__ import annotations

import datetime
import os
import signal
import threading
import time

import grpc

from taskbroker import Client, ConnectOptions, Worker, WorkerStoppedError, is_lease_lost, spec
from taskbroker.v1 import admin_pb2, broker_pb2

S = broker_pb2
State = broker_pb2.TaskState
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


class CaseFailed(Exception):
    pass


def check(cond: bool, reason: str) -> None:
    if not cond:
        raise CaseFailed(reason)


class _BareAborted(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """A locally made ABORTED with no details: not a lost lease."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.ABORTED

    def details(self) -> str:
        return "aborted for another reason"

    def trailing_metadata(self):  # type: ignore[no-untyped-def]
        return ()

    def initial_metadata(self):  # type: ignore[no-untyped-def]
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback) -> bool:  # type: ignore[no-untyped-def]
        return False


class SpecCases:
    tb: Client

    def _worker(self, q: str, handler, **options) -> Worker:  # type: ignore[no-untyped-def]
        options.setdefault("poll_wait", 1)
        return Worker(self.tb, [q], handler, worker_id="conf-python", **options)

    def _get(self, task_id: str) -> admin_pb2.Task:
        return self.tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=10).task

    def _wait_state(self, task_id: str, want: int, within: float = 20) -> admin_pb2.Task:
        end = time.monotonic() + within
        while True:
            t = self._get(task_id)
            if t.state == want or time.monotonic() > end:
                return t
            time.sleep(0.05)

    def spec_defaults(self, q: str) -> None:
        w = Worker(self.tb, [q], lambda ctx: None)
        got = (w.concurrency, w.poll_wait, w.lease_duration, w.heartbeat_interval, w.stop_timeout)
        check(got == (4, 10.0, 30.0, 10.0, 30.0), f"defaults {got}, want (4, 10, 30, 10, 30)")
        check(spec.backoff_ceiling(0) == 0.2, f"backoff ceiling(0) {spec.backoff_ceiling(0)}, want 0.2")
        check(spec.backoff_ceiling(10) == 10.0, f"backoff ceiling(10) {spec.backoff_ceiling(10)}, want 10")
        draws = [spec.backoff(3) for _ in range(50)]
        check(all(0.16 <= d <= 1.6 for d in draws), f"backoff(3) out of [0.16, 1.6]: {min(draws)}..{max(draws)}")
        check(len(set(draws)) > 1, "backoff(3) has no jitter")
        check(
            spec.STOP_CODES
            == {
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.PERMISSION_DENIED,
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.UNIMPLEMENTED,
            },
            f"stop codes {sorted(c.name for c in spec.STOP_CODES)}",
        )

    def lease_lost_reason(self, q: str) -> None:
        task_id = self.tb.submit(q).task_id
        t = self.tb.broker.Lease(
            S.LeaseRequest(worker_id="conf-python", queues=[q], max_tasks=1, lease_duration=_d(30)), timeout=10
        ).tasks[0]
        check(t.task_id == task_id, "leased another task")
        try:
            self.tb.broker.Complete(S.CompleteRequest(task_id=t.task_id, lease_token="stale"), timeout=10)
            raise CaseFailed("Complete with a stale token succeeded")
        except grpc.RpcError as err:
            check(is_lease_lost(err), f"is_lease_lost false for the broker's {err.code().name}")
        check(not is_lease_lost(_BareAborted()), "is_lease_lost true for a bare ABORTED")

    def checkpoint_extends(self, q: str) -> None:
        task_id = self.tb.submit(q).task_id
        seen: dict[str, datetime.datetime] = {}

        def handler(ctx):  # type: ignore[no-untyped-def]
            seen["leased"] = ctx.lease_expires_at
            time.sleep(0.1)
            ctx.checkpoint(b"half")
            seen["after"] = ctx.lease_expires_at
            return b"ok"

        with self._worker(q, handler, lease_duration=4):
            t = self._wait_state(task_id, State.TASK_STATE_SUCCEEDED)
        check(t.state == State.TASK_STATE_SUCCEEDED, f"state {State.Name(t.state)}, want SUCCEEDED")
        check(
            seen.get("after") is not None and seen["after"] > seen["leased"],
            f"expiry {seen.get('leased')} -> {seen.get('after')}: the checkpoint did not extend the lease",
        )

    def deadline_cancels(self, q: str) -> None:
        deadline = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)
        self.tb.submit(q, deadline=deadline)
        reason: list[str | None] = []
        done = threading.Event()

        def handler(ctx):  # type: ignore[no-untyped-def]
            ctx.cancelled.wait(20)
            reason.append(ctx.cancel_reason)
            done.set()
            raise RuntimeError("cancelled")

        with self._worker(q, handler):
            check(done.wait(25), "the handler never ran or never returned")
        check(reason == ["deadline"], f"cancel reason {reason}, want ['deadline']")

    def stop_codes(self, q: str) -> None:
        def run_until_stopped(w: Worker) -> BaseException | None:
            out: list[BaseException | None] = [None]

            def target() -> None:
                try:
                    w.run(handle_signals=False)
                except BaseException as err:  # noqa: BLE001 -- handed to the case
                    out[0] = err

            th = threading.Thread(target=target, daemon=True)
            th.start()
            th.join(20)
            if th.is_alive():
                w.stop(wait=False)
                raise CaseFailed("the worker kept running")
            return out[0]

        err = run_until_stopped(Worker(self.tb, ["has space"], lambda ctx: None, poll_wait=1))
        check(
            isinstance(err, WorkerStoppedError) and err.code == grpc.StatusCode.INVALID_ARGUMENT,
            f"bad queue: stopped with {err!r}, want WorkerStoppedError INVALID_ARGUMENT",
        )
        if os.environ.get("TASKBROKER_TOKEN"):
            o = ConnectOptions.from_env()
            with Client(o.target, token="wrong-token-0123456789", tls=o.tls) as bad:
                err = run_until_stopped(Worker(bad, [q], lambda ctx: None, poll_wait=1))
            check(
                isinstance(err, WorkerStoppedError) and err.code == grpc.StatusCode.UNAUTHENTICATED,
                f"wrong token: stopped with {err!r}, want WorkerStoppedError UNAUTHENTICATED",
            )

    def drain_on_sigterm(self, q: str) -> None:
        a = self.tb.submit(q, b"a").task_id
        running, release = threading.Event(), threading.Event()
        ids: list[str] = []

        def handler(ctx):  # type: ignore[no-untyped-def]
            running.set()
            release.wait(20)
            return b"done"

        def operator() -> None:
            if not running.wait(20):
                return
            ids.append(self.tb.submit(q, b"b").task_id)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)  # the signal handler runs on the main thread; let it stop leasing
            release.set()

        w = self._worker(q, handler, concurrency=1)
        th = threading.Thread(target=operator, daemon=True)
        th.start()
        w.run()  # main thread: SIGTERM stops it
        th.join(5)
        check(running.is_set() and ids, "the handler never ran")
        sa, sb = self._get(a).state, self._get(ids[0]).state
        check(sa == State.TASK_STATE_SUCCEEDED, f"a is {State.Name(sa)}, want SUCCEEDED")
        check(sb == State.TASK_STATE_READY, f"b is {State.Name(sb)}, want READY")

    def trace_propagation(self, q: str) -> None:
        from opentelemetry import context, trace

        sc = trace.SpanContext(
            trace_id=int(TRACE_ID, 16),
            span_id=0x00F067AA0BA902B7,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
        token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(sc)))
        try:
            task_id = self.tb.submit(q).task_id
        finally:
            context.detach(token)
        tp = self._get(task_id).metadata.get("traceparent")
        check(tp == TRACEPARENT, f"metadata traceparent {tp!r}, want {TRACEPARENT!r}")
        seen: list[str] = []

        def handler(ctx):  # type: ignore[no-untyped-def]
            seen.append(format(trace.get_current_span().get_span_context().trace_id, "032x"))
            return b""

        with self._worker(q, handler):
            self._wait_state(task_id, State.TASK_STATE_SUCCEEDED)
        check(seen == [TRACE_ID], f"handler saw trace ids {seen}, want [{TRACE_ID}]")


def _d(seconds: float):  # type: ignore[no-untyped-def]
    from taskbroker.client import duration

    return duration(seconds)


SPEC_CASES = [
    "spec_defaults",
    "lease_lost_reason",
    "checkpoint_extends",
    "deadline_cancels",
    "stop_codes",
    "drain_on_sigterm",
    "trace_propagation",
]
