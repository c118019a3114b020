"""The conformance case ``heartbeat_extends``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

from conformance import WORKER_ID, Cases, S, check
from taskbroker.client import duration


def heartbeat_extends(self: Cases, q: str) -> None:
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
