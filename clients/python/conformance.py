"""Runs clients/conformance/SCENARIO.md against the broker at $TASKBROKER_ADDR.

Prints one PASS/FAIL line per case, then "N passed, M failed"; exits 0 only when M is 0.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import pathlib
import random
import string
import sys
import threading
import time
from collections.abc import Callable

import grpc
from google.protobuf import timestamp_pb2

from conformance_results import CaseFailed as ResultsCaseFailed
from conformance_results import ResultsCases
from conformance_spec import CaseFailed as SpecCaseFailed
from conformance_spec import SpecCases
from conformance_typed import CaseFailed as TypedCaseFailed
from conformance_typed import TypedCases
from taskbroker import (
    AsyncClient,
    AsyncTaskContext,
    AsyncWorker,
    Client,
    ConnectOptions,
    Worker,
)
from taskbroker.client import duration
from taskbroker.v1 import admin_pb2, broker_pb2

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

    # Flow.


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


CASES_DIR = pathlib.Path(__file__).resolve().parent.parent / "conformance" / "cases"


def load_cases() -> list[tuple[str, Callable[[Cases, str], None]]]:
    """The cases of clients/conformance/cases.txt in its order, each the function of the same
    name in its folder's case.py (cases/NN-<name>/case.py, NN its line)."""
    names = (CASES_DIR.parent / "cases.txt").read_text().split()
    cases = []
    for n, name in enumerate(names, 1):
        path = CASES_DIR / f"{n:02d}-{name}" / "case.py"
        spec = importlib.util.spec_from_file_location(f"conformance_case_{name}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cases.append((name, getattr(module, name)))
    return cases


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
        for name, case in load_cases():
            reason = run_case(functools.partial(case, cases), name)
            if reason is None:
                passed += 1
                print(f"PASS {name}", flush=True)
            else:
                failed += 1
                print(f"FAIL {name}: {reason}", flush=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    # Run as the module `conformance`, the one the case files import their helpers from, so
    # that its classes (CaseFailed above all) are the same objects for both.
    import conformance

    sys.exit(conformance.main())
