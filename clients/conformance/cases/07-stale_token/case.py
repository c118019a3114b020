"""The conformance case ``stale_token``, for the Python client: README.md beside this file says
what it does and expects."""

from __future__ import annotations

import grpc

from conformance import CaseFailed, Cases, S, State, check, state_name
from taskbroker import error_info


def stale_token(self: Cases, q: str) -> None:
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
