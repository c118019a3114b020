"""The conformance case ``idempotent_submit``, for the Python client: README.md beside this file
says what it does and expects."""

from __future__ import annotations

from conformance import Cases, S, check


def idempotent_submit(self: Cases, q: str) -> None:
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
