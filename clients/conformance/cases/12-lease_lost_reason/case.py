"""The conformance case ``lease_lost_reason``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

import grpc

from conformance import Cases
from conformance_spec import CaseFailed, S, _BareAborted, _d, check
from taskbroker import is_lease_lost


def lease_lost_reason(self: Cases, q: str) -> None:
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
