"""The conformance case ``bad_input``, for the Python client: README.md beside this file says what
it does and expects."""

from __future__ import annotations

import grpc

from conformance import CaseFailed, Cases, S, check


def bad_input(self: Cases, q: str) -> None:
    try:
        self.tb.broker.Submit(S.SubmitRequest(tasks=[S.TaskSpec(queue="has space")]), timeout=10)
        raise CaseFailed("Submit with queue 'has space': OK, want INVALID_ARGUMENT")
    except grpc.RpcError as err:
        check(
            err.code() == grpc.StatusCode.INVALID_ARGUMENT,
            f"Submit with queue 'has space': {err.code().name}, want INVALID_ARGUMENT",
        )
        check("tasks[0].queue" in (err.details() or ""), f"message {err.details()!r} does not name tasks[0].queue")
