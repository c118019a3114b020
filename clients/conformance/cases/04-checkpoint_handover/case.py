"""The conformance case ``checkpoint_handover``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

from conformance import Cases, S, check
from taskbroker.client import duration


def checkpoint_handover(self: Cases, q: str) -> None:
    first = self.submit_and_lease(S.TaskSpec(queue=q, retry=S.RetryPolicy(initial_backoff=duration(0))), lease_for=1)
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
