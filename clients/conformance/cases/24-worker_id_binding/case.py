"""The conformance case ``worker_id_binding``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

import asyncio
import contextlib
import os

import grpc

from conformance import (
    WORKER_ID,
    CaseFailed,
    Cases,
    S,
    State,
    async_run_until_stopped,
    check,
    describe,
    run_until_stopped,
    state_name,
)
from taskbroker import Client, ConnectOptions, Worker, WorkerStoppedError
from taskbroker.client import duration


def worker_id_binding(self: Cases, q: str) -> None:
    task_id = self.tb.submit(q, b"bound").task_id
    worker_token = os.environ.get("TASKBROKER_WORKER_TOKEN")
    o = ConnectOptions.from_env()
    bound = Client(o.target, token=worker_token, tls=o.tls) if worker_token else None
    with bound or contextlib.nullcontext(self.tb) as w:
        lease = S.LeaseRequest(worker_id=f"{WORKER_ID}-bound-1", queues=[q], max_tasks=1, lease_duration=duration(30))
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
