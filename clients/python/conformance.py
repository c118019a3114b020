"""Runs clients/conformance/SCENARIO.md against the broker at $TASKBROKER_ADDR.

Prints one PASS/FAIL line per case, then "N passed, M failed"; exits 0 only when M is 0.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import random
import string
import sys
import threading
import time
from collections.abc import Callable

import grpc
from google.protobuf import timestamp_pb2

from conformance_spec import SPEC_CASES, SpecCases
from conformance_spec import CaseFailed as SpecCaseFailed
from conformance_typed import CaseFailed as TypedCaseFailed
from conformance_typed import TypedCases
from conformance_results import RESULTS_CASES, ResultsCases
from conformance_results import CaseFailed as ResultsCaseFailed
from taskbroker import (
    AsyncClient,
    AsyncTaskContext,
    AsyncWorker,
    Client,
    ConnectOptions,
    WaitTimeout,
    Worker,
    WorkerStoppedError,
    error_info,
    routing,
)
from taskbroker.client import duration
from taskbroker.v1 import admin_pb2, broker_pb2, event_pb2, schedule_pb2

WORKER_ID = "conf-python"
S = broker_pb2  # short alias for the many message constructors below
State = broker_pb2.TaskState


class CaseFailed(Exception):
    pass


def check(cond: bool, reason: str) -> None:
    if not cond:
        raise CaseFailed(reason)


def ts_in(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(time.time_ns() + int(seconds * 1e9))
    return ts


def state_name(state: int) -> str:
    return State.Name(state)


class Cases(SpecCases, TypedCases, ResultsCases):
    def __init__(self, tb: Client) -> None:
        self.tb = tb

    # Helpers.

    def lease(self, queue: str, n: int = 1, lease_for: float = 30, wait: float = 0) -> list[S.LeasedTask]:
        resp = self.tb.broker.Lease(
            S.LeaseRequest(
                worker_id=WORKER_ID,
                queues=[queue],
                max_tasks=n,
                lease_duration=duration(lease_for),
                wait=duration(wait),
            ),
            timeout=wait + 10,
        )
        return list(resp.tasks)

    def submit_and_lease(self, spec: S.TaskSpec, lease_for: float = 30) -> S.LeasedTask:
        task_id = self.tb.broker.Submit(S.SubmitRequest(tasks=[spec]), timeout=10).results[0].task_id
        tasks = self.lease(spec.queue, 1, lease_for)
        check(
            len(tasks) == 1 and tasks[0].task_id == task_id,
            f"Lease returned {describe(tasks)}, want task {task_id}",
        )
        return tasks[0]

    def get_task(self, task_id: str) -> admin_pb2.Task:
        return self.tb.admin.GetTask(admin_pb2.GetTaskRequest(task_id=task_id), timeout=10).task

    def complete(self, t: S.LeasedTask, result: bytes = b"") -> None:
        self.tb.broker.Complete(
            S.CompleteRequest(task_id=t.task_id, lease_token=t.lease_token, result=result), timeout=10
        )

    # Cases, in SCENARIO.md order.

    def lease_order(self, q: str) -> None:
        specs = [
            S.TaskSpec(queue=q, payload=b"a", priority=0),
            S.TaskSpec(queue=q, payload=b"b", priority=5),
            S.TaskSpec(queue=q, payload=b"c", priority=5, deadline=ts_in(2 * 3600)),
            S.TaskSpec(queue=q, payload=b"d", priority=5, deadline=ts_in(3600)),
            S.TaskSpec(queue=q, payload=b"e", priority=-1),
            S.TaskSpec(queue=q, payload=b"f", priority=10, run_at=ts_in(3600)),
        ]
        self.tb.broker.Submit(S.SubmitRequest(tasks=specs), timeout=10)
        tasks = self.lease(q, 10, 30, 0)
        got = [t.payload.decode() for t in tasks]
        check(got == ["d", "c", "b", "a", "e"], f"leased payloads {got}, want ['d', 'c', 'b', 'a', 'e']")
        for t in tasks:
            check(t.attempt == 1, f"task {t.payload!r}: attempt {t.attempt}, want 1")
        for t in tasks:
            self.complete(t)

    def idempotent_submit(self, q: str) -> None:
        results = []
        for _ in range(2):
            resp = self.tb.broker.Submit(S.SubmitRequest(tasks=[S.TaskSpec(queue=q, key="order-42")]), timeout=10)
            check(len(resp.results) == 1, f"{len(resp.results)} results, want 1")
            results.append(resp.results[0])
        check(
            results[0].task_id == results[1].task_id,
            f"task ids differ: {results[0].task_id} then {results[1].task_id}",
        )
        dedup = [r.deduplicated for r in results]
        check(dedup == [False, True], f"deduplicated {dedup}, want [False, True]")

    def heartbeat_extends(self, q: str) -> None:
        t = self.submit_and_lease(S.TaskSpec(queue=q), lease_for=5)
        resp = self.tb.broker.Heartbeat(
            S.HeartbeatRequest(
                worker_id=WORKER_ID,
                leases=[S.LeaseRef(task_id=t.task_id, lease_token=t.lease_token)],
                extend_by=duration(60),
            ),
            timeout=10,
        )
        check(len(resp.leases) == 1, f"{len(resp.leases)} statuses, want 1")
        st = resp.leases[0]
        check(not st.lost, "Heartbeat: lost=true, want false")
        gained = (st.lease_expires_at.ToNanoseconds() - t.lease_expires_at.ToNanoseconds()) / 1e9
        check(
            gained >= 30,
            f"lease_expires_at moved by {gained:.3f}s ({t.lease_expires_at.ToJsonString()} -> "
            f"{st.lease_expires_at.ToJsonString()}), want >= 30s",
        )
        resp = self.tb.broker.Heartbeat(
            S.HeartbeatRequest(worker_id=WORKER_ID, leases=[S.LeaseRef(task_id=t.task_id, lease_token="stale")]),
            timeout=10,
        )
        check(
            len(resp.leases) == 1 and resp.leases[0].lost,
            f"Heartbeat with stale token: {list(resp.leases)}, want one status with lost=true",
        )

    def checkpoint_handover(self, q: str) -> None:
        first = self.submit_and_lease(
            S.TaskSpec(queue=q, retry=S.RetryPolicy(initial_backoff=duration(0))), lease_for=1
        )
        self.tb.broker.Checkpoint(
            S.CheckpointRequest(task_id=first.task_id, lease_token=first.lease_token, checkpoint=b"step-3"),
            timeout=10,
        )
        tasks = self.lease(q, 1, 30, wait=15)
        check(len(tasks) == 1, f"second Lease (wait 15s) returned {len(tasks)} tasks, want 1")
        second = tasks[0]
        check(second.task_id == first.task_id, f"second Lease returned {second.task_id}, want {first.task_id}")
        check(second.attempt == 2, f"second attempt is {second.attempt}, want 2")
        check(
            second.has_checkpoint and second.checkpoint == b"step-3",
            f"has_checkpoint={second.has_checkpoint} checkpoint={second.checkpoint!r}, want True and b'step-3'",
        )
        check(
            second.fencing_token > first.fencing_token,
            f"fencing_token {second.fencing_token} is not greater than the first {first.fencing_token}",
        )
        self.complete(second)

    def retryable_fail(self, q: str) -> None:
        retry = S.RetryPolicy(max_attempts=3, initial_backoff=duration(0))
        t = self.submit_and_lease(S.TaskSpec(queue=q, retry=retry))
        resp = self.tb.broker.Fail(
            S.FailRequest(task_id=t.task_id, lease_token=t.lease_token, error_message="boom"), timeout=10
        )
        check(
            resp.state in (State.TASK_STATE_READY, State.TASK_STATE_SCHEDULED),
            f"Fail: state {state_name(resp.state)}, want READY or SCHEDULED",
        )
        check(resp.HasField("next_run_at"), "Fail: next_run_at is unset")
        tasks = self.lease(q, 1, 30, wait=5)
        check(
            len(tasks) == 1 and tasks[0].task_id == t.task_id and tasks[0].attempt == 2,
            f"second Lease: {describe(tasks)}, want task {t.task_id} with attempt 2",
        )
        self.complete(tasks[0])

    def non_retryable_fail(self, q: str) -> None:
        t = self.submit_and_lease(S.TaskSpec(queue=q))
        resp = self.tb.broker.Fail(
            S.FailRequest(task_id=t.task_id, lease_token=t.lease_token, error_message="bad input", non_retryable=True),
            timeout=10,
        )
        check(resp.state == State.TASK_STATE_DEAD, f"Fail: state {state_name(resp.state)}, want DEAD")
        task = self.get_task(t.task_id)
        check(
            task.state == State.TASK_STATE_DEAD and task.last_error == "bad input",
            f"GetTask: state {state_name(task.state)} last_error {task.last_error!r}, want DEAD and 'bad input'",
        )

    def stale_token(self, q: str) -> None:
        t = self.submit_and_lease(S.TaskSpec(queue=q))
        try:
            self.tb.broker.Complete(S.CompleteRequest(task_id=t.task_id, lease_token="stale"), timeout=10)
            raise CaseFailed("Complete with stale token: OK, want ABORTED")
        except grpc.RpcError as err:
            check(
                err.code() == grpc.StatusCode.ABORTED,
                f"Complete with stale token: {err.code().name} {err.details()!r}, want ABORTED",
            )
            info = error_info(err)
            check(info is not None, f"ABORTED without a google.rpc.ErrorInfo detail ({err.details()!r})")
            assert info is not None
            check(
                info.reason == "LEASE_LOST" and info.domain == "taskbroker.dev",
                f"ErrorInfo reason {info.reason!r} domain {info.domain!r}, want 'LEASE_LOST' and 'taskbroker.dev'",
            )
        task = self.get_task(t.task_id)
        check(
            task.state == State.TASK_STATE_LEASED,
            f"GetTask after stale Complete: state {state_name(task.state)}, want LEASED",
        )

    def complete_result(self, q: str) -> None:
        t = self.submit_and_lease(S.TaskSpec(queue=q))
        self.complete(t, b"done:42")
        self.complete(t, b"done:42")
        task = self.get_task(t.task_id)
        check(
            task.state == State.TASK_STATE_SUCCEEDED and task.result == b"done:42",
            f"GetTask: state {state_name(task.state)} result {task.result!r}, want SUCCEEDED and b'done:42'",
        )

    def cancel_running(self, q: str) -> None:
        t = self.submit_and_lease(S.TaskSpec(queue=q))
        self.tb.admin.CancelTask(admin_pb2.CancelTaskRequest(task_id=t.task_id), timeout=10)
        hb = self.tb.broker.Heartbeat(
            S.HeartbeatRequest(worker_id=WORKER_ID, leases=[S.LeaseRef(task_id=t.task_id, lease_token=t.lease_token)]),
            timeout=10,
        )
        check(
            len(hb.leases) == 1 and hb.leases[0].cancel_requested and not hb.leases[0].lost,
            f"Heartbeat: {list(hb.leases)}, want one status with cancel_requested=true lost=false",
        )
        resp = self.tb.broker.Fail(
            S.FailRequest(task_id=t.task_id, lease_token=t.lease_token, error_message="cancelled"), timeout=10
        )
        check(resp.state == State.TASK_STATE_CANCELLED, f"Fail: state {state_name(resp.state)}, want CANCELLED")

    def bad_input(self, q: str) -> None:
        try:
            self.tb.broker.Submit(S.SubmitRequest(tasks=[S.TaskSpec(queue="has space")]), timeout=10)
            raise CaseFailed("Submit with queue 'has space': OK, want INVALID_ARGUMENT")
        except grpc.RpcError as err:
            check(
                err.code() == grpc.StatusCode.INVALID_ARGUMENT,
                f"Submit with queue 'has space': {err.code().name}, want INVALID_ARGUMENT",
            )
            check("tasks[0].queue" in (err.details() or ""), f"message {err.details()!r} does not name tasks[0].queue")

    def schedule_every(self, q: str) -> None:
        sc = schedule_pb2
        created = self.tb.schedules.CreateSchedule(
            sc.CreateScheduleRequest(
                schedule=sc.Schedule(
                    schedule_id=q,
                    spec=sc.ScheduleSpec(every=duration(1)),
                    task=sc.TaskTemplate(queue=q, payload=b"tick"),
                    overlap=sc.OVERLAP_POLICY_ALLOW,
                )
            ),
            timeout=10,
        ).schedule
        check(
            created.state == sc.SCHEDULE_STATE_ACTIVE,
            f"state {sc.ScheduleState.Name(created.state)}, want ACTIVE",
        )
        for _ in range(2):
            tasks = self.lease(q, 1, wait=10)
            check(len(tasks) == 1, "no scheduled task within 10s")
            t = tasks[0]
            check(t.payload == b"tick", f"payload {t.payload!r}")
            check(t.metadata.get("taskbroker.schedule_id") == q, f"metadata {dict(t.metadata)} lacks the schedule id")
            self.complete(t)
        got = self.tb.schedules.GetSchedule(sc.GetScheduleRequest(schedule_id=q), timeout=10).schedule
        check(got.runs >= 2, f"runs {got.runs}, want >= 2")
        self.tb.schedules.DeleteSchedule(sc.DeleteScheduleRequest(schedule_id=q), timeout=10)
        try:
            self.tb.schedules.GetSchedule(sc.GetScheduleRequest(schedule_id=q), timeout=10)
            raise CaseFailed("GetSchedule after delete: OK, want NOT_FOUND")
        except grpc.RpcError as err:
            check(err.code() == grpc.StatusCode.NOT_FOUND, f"after delete: {err.code().name}, want NOT_FOUND")

    # Routing, through the submit helper's target= and sticky=.

    def lease_as(
        self, queue: str, worker_id: str, labels: dict[str, str] | None = None, wait: float = 0
    ) -> list[S.LeasedTask]:
        resp = self.tb.broker.Lease(
            S.LeaseRequest(
                worker_id=worker_id,
                queues=[queue],
                max_tasks=10,
                lease_duration=duration(30),
                wait=duration(wait),
                labels=labels or {},
            ),
            timeout=wait + 10,
        )
        return list(resp.tasks)

    def targeted_task(self, q: str) -> None:
        elsewhere = f"{WORKER_ID}-elsewhere"
        self.tb.submit(q, b"a", target=routing.target(labels={"gpu": "a100"}))
        self.tb.submit(q, b"b", target=routing.target(worker_id=elsewhere))
        got = self.lease_as(q, WORKER_ID)
        check(not got, f"a worker without labels leased {payloads(got)}")
        carrying = {"gpu": "a100", "region": "eu"}
        got = self.lease_as(q, WORKER_ID, carrying)
        check(payloads(got) == ["a"], f"the labelled worker leased {payloads(got)}, want ['a']")
        self.complete(got[0])
        got = self.lease_as(q, WORKER_ID, carrying)
        check(not got, f"the labelled worker leased {payloads(got)}, a task targeted at another worker")
        got = self.lease_as(q, elsewhere)
        check(payloads(got) == ["b"], f"{elsewhere} leased {payloads(got)}, want ['b']")
        self.complete(got[0])

    def sticky_retry(self, q: str) -> None:
        retry = S.RetryPolicy(max_attempts=3, initial_backoff=duration(0))
        self.tb.submit(q, b"s", retry=retry, sticky=routing.sticky("soft", timeout=60))
        got = self.lease_as(q, WORKER_ID)
        check(len(got) == 1, f"leased {describe(got)}, want 1 task")
        resp = self.tb.broker.Fail(
            S.FailRequest(task_id=got[0].task_id, lease_token=got[0].lease_token, error_message="boom"), timeout=10
        )
        check(
            resp.state in (State.TASK_STATE_READY, State.TASK_STATE_SCHEDULED),
            f"Fail: state {state_name(resp.state)}, want READY or SCHEDULED",
        )
        other = f"{WORKER_ID}-other"
        stolen = self.lease_as(q, other)
        check(not stolen, f"{other} leased the retry reserved for {WORKER_ID}: {describe(stolen)}")
        again = self.lease_as(q, WORKER_ID, wait=5)
        check(
            len(again) == 1 and again[0].task_id == got[0].task_id and again[0].attempt == 2,
            f"{WORKER_ID} leased {describe(again)}, want task {got[0].task_id} with attempt 2",
        )
        self.complete(again[0])

    # Flow.

    def dependency(self, q: str) -> None:
        a, b = self.tb.broker.Submit(
            S.SubmitRequest(
                tasks=[S.TaskSpec(queue=q, payload=b"a"), S.TaskSpec(queue=q, payload=b"b", depends_on_index=[0])]
            ),
            timeout=10,
        ).results
        tb = self.get_task(b.task_id)
        check(tb.state == State.TASK_STATE_BLOCKED, f"b is {state_name(tb.state)}, want BLOCKED")
        check(list(tb.depends_on) == [a.task_id], f"b depends_on {list(tb.depends_on)}, want [{a.task_id}]")
        got = self.lease(q, 10)
        check(payloads(got) == ["a"], f"first Lease returned {payloads(got)}, want ['a']")
        self.complete(got[0])
        tb = self.get_task(b.task_id)
        check(tb.state == State.TASK_STATE_READY, f"after a completed b is {state_name(tb.state)}, want READY")
        got = self.lease(q, 10, wait=5)
        check(payloads(got) == ["b"], f"second Lease returned {payloads(got)}, want ['b']")
        self.complete(got[0])

        c = self.tb.submit(q, b"c")
        d, e = self.tb.broker.Submit(
            S.SubmitRequest(
                tasks=[
                    S.TaskSpec(queue=q, payload=b"d", depends_on=[c.task_id]),
                    S.TaskSpec(queue=q, payload=b"e", depends_on=[c.task_id], run_if_dependency_fails=True),
                ]
            ),
            timeout=10,
        ).results
        got = self.lease(q, 10)
        check(payloads(got) == ["c"], f"third Lease returned {payloads(got)}, want ['c'] (d and e BLOCKED)")
        self.tb.broker.Fail(
            S.FailRequest(
                task_id=got[0].task_id, lease_token=got[0].lease_token, error_message="broken", non_retryable=True
            ),
            timeout=10,
        )
        td, te = self.get_task(d.task_id), self.get_task(e.task_id)
        check(
            td.state == State.TASK_STATE_CANCELLED and td.cancel_reason == event_pb2.CANCEL_REASON_DEPENDENCY_FAILED,
            f"d is {state_name(td.state)} ({event_pb2.CancelReason.Name(td.cancel_reason)}),"
            " want CANCELLED (CANCEL_REASON_DEPENDENCY_FAILED)",
        )
        check(te.state == State.TASK_STATE_READY, f"e (run_if_dependency_fails) is {state_name(te.state)}, want READY")

    def wait_by_stream(self, q: str) -> None:
        w = self.tb.submit(q, b"w").task_id
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(self.tb.wait, w, timeout=20)
            got = self.lease(q, 1, wait=10)
            check(len(got) == 1 and got[0].task_id == w, f"Lease returned {describe(got)}, want {w}")
            self.complete(got[0], b"waited")
            task = waiting.result(timeout=30)
        check(
            task.state == State.TASK_STATE_SUCCEEDED and task.result == b"waited",
            f"wait returned {state_name(task.state)} result {task.result!r}, want SUCCEEDED b'waited'",
        )
        again = self.tb.wait(w, timeout=5)
        check(again.state == State.TASK_STATE_SUCCEEDED, f"second wait returned {state_name(again.state)}")
        x = self.tb.submit(q, b"x").task_id
        try:
            self.tb.wait(x, timeout=0.5)
            raise CaseFailed("the wait on x returned; want WaitTimeout")
        except WaitTimeout:
            pass
        tx = self.get_task(x)
        check(tx.state == State.TASK_STATE_READY, f"x is {state_name(tx.state)} after the timeout, want READY")

    def lease_next(self, q: str) -> None:
        specs = [S.TaskSpec(queue=q, payload=p.encode(), priority=n) for p, n in (("a", 2), ("b", 1), ("c", 0))]
        self.tb.broker.Submit(S.SubmitRequest(tasks=specs), timeout=10)
        got = self.lease(q, 1)
        check(payloads(got) == ["a"], f"Lease returned {payloads(got)}, want ['a']")
        nxt = S.LeaseRequest(worker_id=WORKER_ID, queues=[q], max_tasks=1, lease_duration=duration(30))
        done = self.tb.broker.Complete(
            S.CompleteRequest(task_id=got[0].task_id, lease_token=got[0].lease_token, lease_next=nxt), timeout=10
        )
        b = list(done.next_tasks)
        check(payloads(b) == ["b"], f"Complete's next_tasks {payloads(b)}, want ['b']")
        check(b[0].attempt == 1 and b[0].lease_token != "", f"b: attempt {b[0].attempt}, want 1 with a lease token")
        a = self.get_task(got[0].task_id)
        check(a.state == State.TASK_STATE_SUCCEEDED, f"a is {state_name(a.state)}, want SUCCEEDED")
        failed = self.tb.broker.Fail(
            S.FailRequest(
                task_id=b[0].task_id, lease_token=b[0].lease_token, error_message="boom", non_retryable=True,
                lease_next=nxt,
            ),
            timeout=10,
        )
        c = list(failed.next_tasks)
        check(failed.state == State.TASK_STATE_DEAD, f"Fail: state {state_name(failed.state)}, want DEAD")
        check(payloads(c) == ["c"], f"Fail's next_tasks {payloads(c)}, want ['c']")
        bad = S.LeaseRequest(worker_id=WORKER_ID, queues=[q], max_tasks=0, lease_duration=duration(30))
        try:
            self.tb.broker.Complete(
                S.CompleteRequest(task_id=c[0].task_id, lease_token=c[0].lease_token, lease_next=bad), timeout=10
            )
            raise CaseFailed("Complete with lease_next.max_tasks 0: OK, want INVALID_ARGUMENT")
        except grpc.RpcError as err:
            check(
                err.code() == grpc.StatusCode.INVALID_ARGUMENT and "lease_next.max_tasks" in (err.details() or ""),
                f"Complete with lease_next.max_tasks 0: {err.code().name} {err.details()!r}, "
                "want INVALID_ARGUMENT naming lease_next.max_tasks",
            )
        tc = self.get_task(c[0].task_id)
        check(tc.state == State.TASK_STATE_LEASED, f"c is {state_name(tc.state)} after the refused Complete")
        last = self.tb.broker.Complete(
            S.CompleteRequest(task_id=c[0].task_id, lease_token=c[0].lease_token, lease_next=nxt), timeout=10
        )
        check(not last.next_tasks, f"the last Complete's next_tasks {payloads(list(last.next_tasks))}, want none")
        tc = self.get_task(c[0].task_id)
        check(tc.state == State.TASK_STATE_SUCCEEDED, f"c is {state_name(tc.state)}, want SUCCEEDED")

    def worker_id_binding(self, q: str) -> None:
        task_id = self.tb.submit(q, b"bound").task_id
        worker_token = os.environ.get("TASKBROKER_WORKER_TOKEN")
        o = ConnectOptions.from_env()
        bound = Client(o.target, token=worker_token, tls=o.tls) if worker_token else None
        with bound or contextlib.nullcontext(self.tb) as w:
            lease = S.LeaseRequest(
                worker_id=f"{WORKER_ID}-bound-1", queues=[q], max_tasks=1, lease_duration=duration(30)
            )
            got = list(w.broker.Lease(lease, timeout=10).tasks)
            check([t.task_id for t in got] == [task_id], f"Lease as {lease.worker_id} returned {describe(got)}")
            if worker_token:
                lease.worker_id = WORKER_ID
                try:
                    w.broker.Lease(lease, timeout=10)
                    raise CaseFailed(f"Lease as {WORKER_ID} with the bound token: OK, want PERMISSION_DENIED")
                except grpc.RpcError as err:
                    check(
                        err.code() == grpc.StatusCode.PERMISSION_DENIED and "worker_id" in (err.details() or ""),
                        f"Lease as {WORKER_ID}: {err.code().name} {err.details()!r}, "
                        "want PERMISSION_DENIED naming worker_id",
                    )
            w.broker.Complete(S.CompleteRequest(task_id=task_id, lease_token=got[0].lease_token), timeout=10)
            t = self.get_task(task_id)
            check(t.state == State.TASK_STATE_SUCCEEDED, f"the task is {state_name(t.state)}, want SUCCEEDED")
            if worker_token:
                err = run_until_stopped(Worker(w, [q], lambda ctx: b"", poll_wait=1, worker_id=WORKER_ID))
                check(
                    isinstance(err, WorkerStoppedError) and err.code == grpc.StatusCode.PERMISSION_DENIED,
                    f"Worker as {WORKER_ID}: stopped with {err!r}, want WorkerStoppedError PERMISSION_DENIED",
                )
        if worker_token:
            err = asyncio.run(async_run_until_stopped(o, worker_token, q))
            check(
                isinstance(err, WorkerStoppedError) and err.code == grpc.StatusCode.PERMISSION_DENIED,
                f"AsyncWorker as {WORKER_ID}: stopped with {err!r}, want WorkerStoppedError PERMISSION_DENIED",
            )


def run_until_stopped(w: Worker) -> BaseException | None:
    """What the Worker's run raised, once it stopped by itself (within 20 s)."""
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


async def async_run_until_stopped(o: ConnectOptions, token: str, q: str) -> BaseException | None:
    """The same for the AsyncWorker, on a client with `token`."""

    async def handler(ctx: AsyncTaskContext) -> bytes:
        return b""

    async with AsyncClient(o.target, token=token, tls=o.tls) as client:
        w = AsyncWorker(client, [q], handler, poll_wait=1, worker_id=WORKER_ID)
        try:
            await asyncio.wait_for(w.run(handle_signals=False), 20)
        except asyncio.TimeoutError as err:
            raise CaseFailed("the async worker kept running") from err
        except BaseException as err:  # noqa: BLE001 -- handed to the case
            return err
    return None


def payloads(tasks: list[S.LeasedTask]) -> list[str]:
    return [t.payload.decode() for t in tasks]


CASES = [
    "lease_order",
    "idempotent_submit",
    "heartbeat_extends",
    "checkpoint_handover",
    "retryable_fail",
    "non_retryable_fail",
    "stale_token",
    "complete_result",
    "cancel_running",
    "bad_input",
    *SPEC_CASES,
    "schedule_every",
    "targeted_task",
    "sticky_retry",
    "dependency",
    "wait_by_stream",
    "lease_next",
    "worker_id_binding",
    "typed_handlers",
    *RESULTS_CASES,
]


def describe(tasks: list[S.LeasedTask]) -> str:
    return f"{len(tasks)} tasks [" + " ".join(f"{t.task_id}(attempt {t.attempt})" for t in tasks) + "]"


def queue_name(case: str) -> str:
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=6))
    return f"conf.python.{case}.{suffix}"


def run_case(fn: Callable[[str], None], name: str) -> str | None:
    """None when the case passes, otherwise the reason it failed."""
    try:
        fn(queue_name(name))
        return None
    except (CaseFailed, SpecCaseFailed, TypedCaseFailed, ResultsCaseFailed) as err:
        return str(err)
    except grpc.RpcError as err:
        return f"unexpected {err.code().name}: {err.details()}"
    except Exception as err:  # noqa: BLE001 -- report, do not crash: the remaining cases still run
        return f"{type(err).__name__}: {err}"


def main() -> int:
    addr = os.environ.get("TASKBROKER_ADDR")
    if not addr:
        print("TASKBROKER_ADDR is not set (host:port)", file=sys.stderr)
        return 2
    passed = failed = 0
    with Client.from_env(addr) as tb:
        cases = Cases(tb)
        for name in CASES:
            reason = run_case(getattr(cases, name), name)
            if reason is None:
                passed += 1
                print(f"PASS {name}", flush=True)
            else:
                failed += 1
                print(f"FAIL {name}: {reason}", flush=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
