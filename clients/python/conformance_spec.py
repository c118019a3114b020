"""The client-library cases of clients/conformance/cases/ (docs/client-spec.md points
1 to 7), run by conformance.py after the contract cases.

The code of each case is its folder's case.py; this module holds what they share.
"""

from __future__ import annotations

import time

import grpc

from taskbroker import Client, Worker
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


def _d(seconds: float):  # type: ignore[no-untyped-def]
    from taskbroker.client import duration

    return duration(seconds)
