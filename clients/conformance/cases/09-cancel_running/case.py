"""The conformance case ``cancel_running``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

from conformance import WORKER_ID, Cases, S, State, check, state_name
from taskbroker.v1 import admin_pb2


def cancel_running(self: Cases, q: str) -> None:
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
